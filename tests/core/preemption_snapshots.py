"""Hand-made snapshots for the preemption, quota and fair-share tests: nodes of H100s, models
of one profile, replicas placed by hand."""

from __future__ import annotations

from typing import Any

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.core.simulate import apply_plan

NOW = "2026-12-02T10:00:00Z"
LONG_AGO = "2026-12-02T08:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"


def node(nid: str, gpus: int, cpu: float = 128, mem: float = 1024) -> dict[str, Any]:
    devs = [{"id": f"{nid}-g{i}", "model": H100, "memory_gb": 80} for i in range(gpus)]
    return {"id": nid, "name": nid, "cpu_cores": cpu, "memory_gb": mem, "gpus": devs}


def model(
    name: str,
    cls: str,
    owner: str,
    lo: int = 0,
    hi: int = 1,
    gpus: int = 1,
    shards: int = 1,
    cpu: float = 4,
    mem: float = 16,
    **scaling: Any,
) -> dict[str, Any]:
    prof = {"name": "p", "gpus": gpus, "shards": shards, "cpu_cores": cpu, "memory_gb": mem}
    return {
        "name": name,
        "owner": owner,
        "class": cls,
        "scaling": {"min": lo, "max": hi, "target_per_replica": 1, **scaling},
        "profiles": [prof],
    }


def replica(
    rid: str, name: str, shards: list[tuple[str, list[str]]], **extra: Any
) -> dict[str, Any]:
    return {
        "id": rid,
        "model": name,
        "profile": "p",
        "state": "running",
        "created_at": LONG_AGO,
        "ready_at": LONG_AGO,
        "shards": [{"node": n, "gpus": g} for n, g in shards],
        **extra,
    }


def snap(**body: Any) -> Snapshot:
    body.setdefault("now", NOW)
    models = body.get("models", [])
    body.setdefault("demand", {m["name"]: {"inflight": 100} for m in models})
    return Snapshot.model_validate(body)


def stops(plan: Plan) -> list[StopAction]:
    return [a for a in plan.actions if isinstance(a, StopAction)]


def starts(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


def run(s: Snapshot, passes: int = 20, advance_s: float = 60) -> tuple[Snapshot, list[Plan]]:
    plans = []
    for _ in range(passes):
        plan = decide(s)
        plans.append(plan)
        s = apply_plan(s, plan, advance_s)
    return s, plans


def live_per_model(s: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in s.replicas:
        if r.counts:
            out[r.model] = out.get(r.model, 0) + 1
    return out
