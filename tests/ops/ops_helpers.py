"""A small snapshot and plan over the stand-ins' built-in fleet, for observer tests."""

from __future__ import annotations

from datetime import UTC, datetime

from llm_scheduler_standins.fleet import builtin_fleet
from scheduler.core.models import (
    Model,
    ModelStatus,
    Node,
    Plan,
    Profile,
    Replica,
    Shard,
    Snapshot,
    StopAction,
)

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def snapshot_and_plan() -> tuple[Snapshot, Plan]:
    # The fleet as the scheduler reads it (the stand-ins describe machines in their own model).
    nodes = [Node.model_validate(n.model_dump()) for n in builtin_fleet()]
    h100 = nodes[0]
    mig_gpu = next(g for n in nodes for g in n.gpus if g.mig)
    assert mig_gpu.mig
    models = [
        Model(name="llama-70b", owner="org/a", **{"class": "critical"},
              profiles=[Profile(name="tp4", gpus=4)]),
        Model(name="tiny-1b", owner="org/b", **{"class": "opportunistic"},
              profiles=[Profile(name="mig", mig_profile="1g.10gb")]),
        Model(name="big-405b", owner="org/a", **{"class": "standard"},
              profiles=[Profile(name="tp8x2", gpus=8, shards=2)]),
    ]  # fmt: skip
    replicas = [
        Replica(id="r-1", model="llama-70b", profile="tp4", state="running", created_at=NOW,
                shards=[Shard(node=h100.id, gpus=[g.id for g in h100.gpus[:4]])]),
        Replica(id="r-2", model="tiny-1b", profile="mig", state="starting", created_at=NOW,
                shards=[Shard(node=nodes[-1].id, gpus=[mig_gpu.mig[-1].id])]),
    ]  # fmt: skip
    snap = Snapshot(now=NOW, nodes=nodes, models=models, replicas=replicas)
    plan = Plan(
        models={
            "llama-70b": ModelStatus(desired=1, live=1),
            "tiny-1b": ModelStatus(desired=1, live=1),
            "big-405b": ModelStatus(
                desired=1, live=0, pending="profile tp8x2: 2 nodes with 8 free GPUs needed, 1 found"
            ),
        }
    )
    return snap, plan


def preemption() -> StopAction:
    return StopAction(
        replica="r-2", model="tiny-1b", reason="preempted for big-405b", preempted_for="big-405b"
    )
