"""Replicas that go whatever the demand: stuck starting past their load grace, and
those on a draining node, moved make-before-break where room allows."""

from __future__ import annotations

from typing import Any

from scheduler.core.decide import decide
from scheduler.core.models import Plan, StartAction, StopAction
from scheduler.core.validate import parse_snapshot


def _node(node_id: str, *, gpus: int = 2, draining: bool = False, held: list[str] | None = None):
    return {
        "id": node_id,
        "name": node_id,
        "eligible": not draining,
        "draining": draining,
        "cpu_cores": 32,
        "memory_gb": 256,
        "held": held or [],
        "gpus": [
            {"id": f"{node_id}-g{i}", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80}
            for i in range(gpus)
        ],
    }


def _replica(rid: str, node: str, state: str, created: str = "2026-12-02T09:00:00Z") -> dict:
    return {
        "id": rid,
        "model": "qwen-7b",
        "profile": "one",
        "state": state,
        "created_at": created,
        "ready_at": "2026-12-02T09:05:00Z" if state == "running" else None,
        "shards": [{"node": node, "gpus": [f"{node}-g0"]}],
    }


def _plan(nodes: list[dict], replicas: list[dict], *, want: int = 1, grace: int = 1800) -> Plan:
    snap: dict[str, Any] = {
        "now": "2026-12-02T10:00:00Z",
        "nodes": nodes,
        "models": [
            {
                "name": "qwen-7b",
                "owner": "org/a",
                "class": "standard",
                "scaling": {"min": want, "max": want},
                "profiles": [{"name": "one", "gpus": 1, "cpu_cores": 4, "memory_gb": 16}],
                "load_grace_s": grace,
            }
        ],
        "replicas": replicas,
        # No scale-down window: a fresh snapshot would keep every live replica
        # for a whole window, the replaced one included.
        "settings": {"scale_down_window_s": 0},
    }
    return decide(parse_snapshot(snap))


def _stops(plan: Plan) -> dict[str, str]:
    return {a.replica: a.reason for a in plan.actions if isinstance(a, StopAction)}


def _starts(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


def test_a_replica_starting_past_its_load_grace_is_stopped_and_replaced_after() -> None:
    nodes = [_node("n1")]
    stuck = _replica("r-stuck", "n1", "starting", created="2026-12-02T09:00:00Z")
    plan = _plan(nodes, [stuck], grace=1800)
    assert _stops(plan) == {"r-stuck": "still starting after 3600s, past its load grace of 1800s"}
    assert _starts(plan) == []  # its room is still held this pass; replaced once it stops
    assert plan.models["qwen-7b"].live == 1
    # Within its grace it is left alone.
    assert _stops(_plan(nodes, [stuck], grace=7200)) == {}
    # A running replica is never timed out, however old.
    assert _stops(_plan(nodes, [_replica("r-old", "n1", "running")], grace=30)) == {}
    # Once it is stopping, the model gets a new replica.
    stopping = {**stuck, "state": "stopping"}
    (start,) = _starts(_plan(nodes, [stopping], grace=1800))
    assert start.shards[0].gpus == ["n1-g1"]


def test_timed_out_replica_is_not_doubled_by_a_scale_down() -> None:
    nodes = [_node("n1", gpus=4)]
    good = _replica("r-good", "n1", "running", created="2026-12-02T09:50:00Z")
    stuck = _replica("r-stuck", "n1", "starting", created="2026-12-02T09:00:00Z")
    stuck["shards"][0]["gpus"] = ["n1-g1"]
    assert _stops(_plan(nodes, [good, stuck], want=1, grace=1800)) == {
        "r-stuck": "still starting after 3600s, past its load grace of 1800s"
    }


def test_draining_node_replica_is_moved_make_before_break() -> None:
    nodes = [_node("n1", draining=True), _node("n2")]
    old = _replica("r-old", "n1", "running")
    # 1. The replica on the draining node keeps serving; a replacement starts elsewhere.
    plan = _plan(nodes, [old])
    assert _stops(plan) == {}
    (start,) = _starts(plan)
    assert start.shards[0].node == "n2"
    assert plan.models["qwen-7b"].pending is None
    # 2. While the replacement starts, nothing more happens.
    new = _replica("r-new", "n2", "starting", created="2026-12-02T09:59:00Z")
    plan = _plan(nodes, [old, new])
    assert plan.actions == []
    # 3. Once it runs, the old one is stopped.
    plan = _plan(nodes, [old, {**new, "state": "running"}])
    assert _stops(plan) == {"r-old": "its node is draining; replaced elsewhere"}
    assert _starts(plan) == []


def test_draining_without_room_keeps_the_replica_until_the_drain_takes_it() -> None:
    nodes = [_node("n1", draining=True), _node("n2", held=["n2-g0", "n2-g1"])]
    plan = _plan(nodes, [_replica("r-old", "n1", "running")])
    assert plan.actions == []
    assert plan.models["qwen-7b"].pending  # says why no replacement could be placed


def test_a_replica_not_serving_on_a_draining_node_is_stopped_at_once() -> None:
    nodes = [_node("n1", draining=True), _node("n2")]
    plan = _plan(nodes, [_replica("r-new", "n1", "starting", created="2026-12-02T09:59:00Z")])
    assert _stops(plan) == {"r-new": "its node is draining and it is not serving yet"}
    (start,) = _starts(plan)
    assert start.shards[0].node == "n2"


def test_devices_held_by_others_are_not_given() -> None:
    nodes = [_node("n1", held=["n1-g0"])]
    (start,) = _starts(_plan(nodes, []))
    assert start.shards[0].gpus == ["n1-g1"]
    plan = _plan([_node("n1", held=["n1-g0", "n1-g1"])], [])
    assert _starts(plan) == [] and plan.models["qwen-7b"].pending
