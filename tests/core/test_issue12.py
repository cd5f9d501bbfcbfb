"""Issue 12: quotas, fair sharing and preemption that hold pass after pass.

Each failure the issue lists is pinned here as a hand-made snapshot."""

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


# ------------------------------------------------------------------ item 1


def test_a_gpu_only_guarantee_protects_replicas_that_also_use_cpu() -> None:
    # org/b is guaranteed 4 GPUs (as consul/kv-seed.yaml writes it) and holds 4 with CPU and
    # memory: nothing of it is borrowed, so another owner's critical model may not take it.
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("chat", "critical", "org/a", lo=1, gpus=4),
            model("batch", "opportunistic", "org/b", gpus=4),
        ],
        replicas=[replica("r-b", "batch", [("n1", ["n1-g0", "n1-g1", "n1-g2", "n1-g3"])])],
        quotas=[{"owner": "org/b", "guarantee": {"gpus": 4}}],
    )
    assert stops(decide(s)) == []


def test_a_gpu_only_guarantee_lets_its_owner_reclaim() -> None:
    # Within its GPU guarantee, org/b takes back what org/a borrowed, though its profile asks
    # for CPU the guarantee does not name.
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("chat", "standard", "org/a", gpus=4),
            model("batch", "standard", "org/b", lo=1, gpus=4),
        ],
        replicas=[replica("r-a", "chat", [("n1", ["n1-g0", "n1-g1", "n1-g2", "n1-g3"])])],
        quotas=[{"owner": "org/b", "guarantee": {"gpus": 4}}],
    )
    assert [(a.replica, a.preempted_for) for a in stops(decide(s))] == [("r-a", "batch")]


# ------------------------------------------------------------------ item 7


def test_scale_to_zero_waits_eviction_grace_for_min_zero() -> None:
    # Used 60 s ago, no load now, eviction_grace_s 300: the replica stays; at 301 s it goes.
    def at(ago: str) -> Snapshot:
        return snap(
            nodes=[node("n1", 1)],
            settings={"eviction_grace_s": 300},
            models=[model("od", "standard", "org/a", lo=0, hi=2, on_demand=True)],
            replicas=[replica("r-1", "od", [("n1", ["n1-g0"])])],
            demand={"od": {"inflight": 0, "last_used": ago}},
        )

    kept = decide(at("2026-12-02T09:59:00Z"))
    assert kept.actions == [] and kept.models["od"].desired == 1
    gone = decide(at("2026-12-02T09:54:59Z"))
    assert [a.replica for a in stops(gone)] == ["r-1"]
