"""Retirement in the core: replicas of a model whose key was deleted stop after the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.core.decide import decide
from scheduler.core.models import Replica, Settings, Shard, Snapshot, StopAction

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _snapshot(retired: dict[str, datetime]) -> Snapshot:
    rep = Replica(
        id="r-1",
        model="gone",
        profile="p",
        state="running",
        created_at=NOW - timedelta(hours=1),
        shards=[Shard(node="n1", gpus=["GPU-1"])],
    )
    return Snapshot(now=NOW, settings=Settings(retire_grace_s=600), replicas=[rep], retired=retired)


def test_replicas_of_a_retired_model_stop_only_after_the_grace() -> None:
    early = decide(_snapshot({"gone": NOW - timedelta(seconds=599)}))
    assert early.actions == []
    assert early.models["gone"].pending == (
        "retiring: its key was deleted; its replicas stop at 2026-12-02T10:00:01Z"
    )
    assert early.models["gone"].pending_code == "retiring"
    due = decide(_snapshot({"gone": NOW - timedelta(seconds=600)}))
    assert due.actions == [
        StopAction(
            replica="r-1",
            model="gone",
            reason="retired: its key was deleted at 2026-12-02T09:50:00Z",
            code="retired",
        )
    ]
    assert (due.models["gone"].desired, due.models["gone"].pending) == (0, None)


def test_a_replica_of_an_unknown_model_is_left_alone() -> None:
    plan = decide(_snapshot({}))
    assert plan.actions == [] and "gone" not in plan.models
