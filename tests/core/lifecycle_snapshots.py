"""Hand-made snapshots for the lifecycle tests: nodes, one model, its replicas."""

from __future__ import annotations

from typing import Any

from scheduler.core.decide import decide
from scheduler.core.models import Plan, StartAction, StopAction
from scheduler.core.validate import parse_snapshot

NOW = "2026-12-02T10:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def _node(node_id: str, *, gpus: int = 2, model: str = H100, dc: str = "dc1", **meta: str):
    return {
        "id": node_id,
        "name": node_id,
        "datacenter": dc,
        "meta": meta,
        "address": f"10.0.0.{len(node_id)}",
        "cpu_cores": 64,
        "memory_gb": 512,
        "gpus": [{"id": f"{node_id}-g{i}", "model": model, "memory_gb": 80} for i in range(gpus)],
    }


def _rep(
    rid: str,
    node: str,
    *,
    state: str = "running",
    profile: str = "one",
    spec: str = "v1",
    created: str = "2026-12-02T08:00:00Z",
    gpu: int = 0,
) -> dict[str, Any]:
    return {
        "id": rid,
        "model": "m",
        "profile": profile,
        "state": state,
        "created_at": created,
        "ready_at": "2026-12-02T08:05:00Z" if state == "running" else None,
        "spec": spec,
        "shards": [{"node": node, "gpus": [f"{node}-g{gpu}"]}],
    }


def _model(want: int, profiles: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "owner": "org/a",
        "scaling": {"min": want, "max": want},
        "profiles": profiles or [{"name": "one", "gpus": 1, "cpu_cores": 4, "memory_gb": 16}],
        **extra,
    }


def _plan(nodes: list[dict], replicas: list[dict], model: dict, **snap: Any) -> Plan:
    body = {"now": NOW, "nodes": nodes, "models": [model], "replicas": replicas, **snap}
    # No scale-down window: a fresh snapshot would keep every live replica for a
    # whole window, the replaced ones included (after a restart a roll-out waits that long).
    body["settings"] = {"scale_down_window_s": 0, **body.get("settings", {})}
    return decide(parse_snapshot(body))


def _stops(plan: Plan) -> dict[str, str]:
    return {a.replica: a.reason for a in plan.actions if isinstance(a, StopAction)}


def _starts(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


def _simulate(
    nodes: list[dict], replicas: list[dict], model: dict, passes: int, **snap: Any
) -> list[Plan]:
    """Run passes as the service would: a start is `starting` in the next pass and `running`
    in the one after (with the current spec); a stop is gone by the next pass. Failed
    roll-outs and moves are handed on as the loop hands them on."""
    specs = snap.get("specs", {})
    plans: list[Plan] = []
    reps = [dict(r) for r in replicas]
    moves: dict[str, str] = {}
    for _ in range(passes):
        plan = _plan(nodes, reps, model, moves=moves, **snap)
        plans.append(plan)
        moves = dict(plan.moves)
        gone = set(_stops(plan))
        reps = [
            {**r, "state": "running", "ready_at": "2026-12-02T08:00:00Z"}
            if r["state"] == "starting"
            else r
            for r in reps
            if r["id"] not in gone
        ]
        for a in _starts(plan):
            reps.append(
                {
                    "id": a.replica, "model": "m", "profile": a.profile, "state": "starting",
                    "created_at": NOW, "spec": specs.get("m", {}).get(a.profile, ""),
                    "shards": [s.model_dump() for s in a.shards],
                }
            )  # fmt: skip
        running = sum(1 for r in reps if r["state"] == "running")
        assert running >= model["scaling"]["min"], f"fewer than min running after {plan}"
    return plans
