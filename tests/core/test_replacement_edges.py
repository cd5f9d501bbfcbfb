"""Nothing blocks without a word: a replacement under way is not growth the scale-down window
keeps (rule S2); a replica on an unhealthy GPU is replaced as a drained one is, and replicas of
a removed profile are named and retired within the grace (rule L1, L2). Plan tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from lifecycle_snapshots import (
    A100,
    NOW,
    _model,
    _node,
    _plan,
    _rep,
    _simulate,
    _starts,
    _stops,
)

# Demand for two replicas, room for four: the scale-down window could keep a third.
SCALING = {"min": 1, "max": 4, "target_per_replica": 10}
TWO_BUSY = {"demand": {"m": {"inflight": 20, "queued": 0}}}
# No marks handed on: the window is never watched whole, as for 300 s after a restart.
WINDOW = {"settings": {"scale_down_window_s": 300}}


def test_a_roll_outs_surge_replica_is_the_replacement_not_growth() -> None:
    nodes = [_node("n1", gpus=4)]
    old = [_rep("r-0", "n1"), _rep("r-1", "n1", gpu=1)]
    model = _model(2, scaling=SCALING)
    plans = _simulate(nodes, old, model, 8, specs={"m": {"one": "v2"}}, **TWO_BUSY, **WINDOW)
    assert all(p.models["m"].desired == 2 for p in plans)
    assert plans[-1].actions == [] and plans[-1].models["m"].rollout is None
    assert sum(len(_starts(p)) for p in plans) == 2  # each old replica replaced once
    assert sorted(r for p in plans for r in _stops(p)) == ["r-0", "r-1"]


def test_a_moves_new_replica_is_the_replacement_not_growth() -> None:
    nodes = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    profiles = [
        {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
        {"name": "a100", "gpus": 1, "gpu_models": ["A100"]},
    ]
    fallback = [_rep("r-a0", "a", profile="a100"), _rep("r-a1", "a", profile="a100", gpu=1)]
    model = _model(2, profiles, scaling=SCALING)
    plans = _simulate(nodes, fallback, model, 10, **TWO_BUSY, **WINDOW)
    assert all(p.models["m"].desired == 2 for p in plans)
    assert plans[-1].actions == []
    assert sorted(r for p in plans for r in _stops(p)) == ["r-a0", "r-a1"]


# ---------------------------------------------------------------- unhealthy GPUs


def _sick(node: dict, gpu: int = 0) -> dict:
    """The node with one GPU its reporter marked unhealthy (XID errors, ECC, lost)."""
    gpus = [dict(g) for g in node["gpus"]]
    gpus[gpu]["healthy"] = False
    return {**node, "gpus": gpus}


def test_a_replica_on_an_unhealthy_gpu_is_replaced_make_before_break() -> None:
    nodes = [_sick(_node("n1")), _node("n2")]
    reps = [_rep("r-0", "n1"), _rep("r-1", "n1", gpu=1)]
    plans = _simulate(nodes, reps, _model(2), 4)
    first = plans[0]
    (start,) = _starts(first)
    assert start.shards[0].node == "n2" and _stops(first) == {}  # it serves until covered
    assert first.models["m"].rollout == "replacing 1 replica on an unhealthy GPU (n1-g0 on n1)"
    stops = [a for p in plans for a in p.actions if a.op == "stop"]
    assert [(a.replica, a.code) for a in stops] == [("r-0", "unhealthy_gpu")]
    assert stops[0].reason == "its GPU n1-g0 on n1 is unhealthy; replaced elsewhere"
    assert plans[-1].actions == [] and plans[-1].models["m"].rollout is None


def test_without_room_it_serves_on_and_the_status_says_why() -> None:
    nodes = [_sick(_node("n1"))]
    plan = _simulate(nodes, [_rep("r-0", "n1"), _rep("r-1", "n1", gpu=1)], _model(2), 1)[0]
    assert plan.actions == []
    status = plan.models["m"]
    assert status.rollout == "replacing 1 replica on an unhealthy GPU (n1-g0 on n1)"
    assert status.pending_code == "no_room" and status.live == 2
    # One still starting there is not serving: it goes at once.
    fresh = _rep("r-0", "n1", state="starting", created="2026-12-02T09:59:00Z")
    plan = _plan(nodes, [fresh], _model(1))
    assert [(a.replica, a.code) for a in plan.actions if a.op == "stop"] == [
        ("r-0", "unhealthy_gpu")
    ]


# ---------------------------------------------------------------- removed profiles

ONE_NODE = [_node("n1")]  # two GPUs, both held by replicas of the removed profile "one"
TWO = [{"name": "two", "gpus": 1, "cpu_cores": 4, "memory_gb": 16}]


def _removed(ago_s: int | None) -> dict:
    """The adapter's note of when profile "one" went missing from model m (None: no note)."""
    if ago_s is None:
        return {}
    since = (datetime.fromisoformat(NOW) - timedelta(seconds=ago_s)).isoformat()
    return {"removed_profiles": {"m": {"one": since}}}


def test_replicas_of_a_removed_profile_are_named_and_retired_within_the_grace() -> None:
    stale = [_rep("r-0", "n1"), _rep("r-1", "n1", gpu=1)]
    # Within the grace (600 s): they serve on, the model says what holds its room, and till when.
    plan = _plan(ONE_NODE, stale, _model(2, TWO), **_removed(100))
    assert plan.actions == []
    status = plan.models["m"]
    assert (status.live, status.desired) == (0, 2)
    assert status.pending == (
        "profile two: no node has 1 free GPU (too few free GPUs on 1 node); removed profile "
        "one: 2 replicas hold their room until current replicas run, at the latest until "
        "2026-12-02T10:08:20Z (retire grace)"
    )
    # The grace has passed: they go, replaced or not (profile two starts once they are gone).
    plan = _plan(ONE_NODE, stale, _model(2, TWO), **_removed(700))
    assert [(a.replica, a.code) for a in plan.actions if a.op == "stop"] == [
        ("r-0", "profile_removed"),
        ("r-1", "profile_removed"),
    ]
    assert "its retire grace has passed" in _stops(plan)["r-0"]
    # No date (a snapshot without the adapter's note): never stopped unreplaced, but named.
    plan = _plan(ONE_NODE, stale, _model(2, TWO), **_removed(None))
    assert plan.actions == []
    assert (plan.models["m"].pending or "").endswith(
        "removed profile one: 2 replicas hold their room until current replicas run"
    )


def test_with_room_the_replacement_starts_and_the_status_says_what_stays() -> None:
    nodes = [_node("n1"), _node("n2")]
    plan = _plan(nodes, [_rep("r-0", "n1")], _model(1, TWO), **_removed(100))
    assert len(_starts(plan)) == 1 and _stops(plan) == {}
    status = plan.models["m"]
    assert status.pending_code == "profile_removed"
    assert status.pending == (
        "removed profile one: 1 replica holds its room until current replicas run, at the "
        "latest until 2026-12-02T10:08:20Z (retire grace)"
    )
