"""Model lifecycle in the core: rolling updates, moving back to a better profile,
locality of multi-node replicas, and GPU cost. Plan tests: snapshot in, plan out."""

from __future__ import annotations

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

# ---------------------------------------------------------------- rolling update


def test_rolling_update_replaces_one_at_a_time_make_before_break() -> None:
    nodes = [_node("n1", gpus=5)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(3)]
    # 1. One replacement starts; every old replica still serves.
    plan = _plan(nodes, old, _model(3), specs=specs)
    assert _stops(plan) == {}
    assert len(_starts(plan)) == 1
    progress = plan.models["m"].rollout or ""
    assert "0 on the new spec, 3 on the previous, 1 being replaced" in progress
    new = {**_rep("r-new", "n1", state="starting", spec="v2", gpu=3), "created_at": NOW}
    # 2. While it starts nothing more happens: no second replacement (surge 1), no stop.
    plan = _plan(nodes, [*old, new], _model(3), specs=specs)
    assert plan.actions == []
    # 3. Once it runs, the oldest old replica stops and the next replacement starts.
    running = {**new, "state": "running", "ready_at": NOW}
    plan = _plan(nodes, [*old, running], _model(3), specs=specs)
    assert _stops(plan) == {"r-0": "rolling update: replaced by a replica on the model's new spec"}
    assert len(_starts(plan)) == 1
    # The same replicas on the current spec: nothing to do.
    assert _plan(nodes, old, _model(3), specs={"m": {"one": "v1"}}).actions == []
    # A replica whose spec is unknown (a job from before digests) is never rolled.
    unknown = [{**r, "spec": ""} for r in old]
    assert _plan(nodes, unknown, _model(3), specs=specs).actions == []


def test_rolling_update_surge_setting_and_never_below_desired_live() -> None:
    nodes = [_node("n1", gpus=8)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(4)]
    plan = _plan(nodes, old, _model(4), specs=specs, settings={"rollout_surge": 2})
    assert len(_starts(plan)) == 2 and _stops(plan) == {}
    # Without room for a replacement the old replicas keep serving, and status says why.
    full = [_node("n1", gpus=4)]
    plan = _plan(full, old, _model(4), specs=specs)
    assert _stops(plan) == {} and _starts(plan) == []
    assert plan.models["m"].pending is not None
    assert plan.models["m"].rollout is not None


def test_a_replacement_that_does_not_become_ready_stops_the_roll_out() -> None:
    nodes = [_node("n1", gpus=4)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(2)]
    stuck = {
        **_rep("r-new", "n1", state="starting", spec="v2", gpu=3),
        "created_at": "2026-12-02T09:00:00Z",
    }
    plan = _plan(nodes, [*old, stuck], _model(2, load_grace_s=600), specs=specs)
    assert set(_stops(plan)) == {"r-new"}  # the old replicas stay
    assert plan.stalled == {"m": "v2"}
    assert "roll-out stopped" in (plan.models["m"].rollout or "")
    # Next pass, with the failure handed on: no new replacement, old replicas kept.
    gone = {**stuck, "state": "stopping"}
    plan = _plan(nodes, [*old, gone], _model(2, load_grace_s=600), specs=specs, stalled={"m": "v2"})
    assert plan.actions == [] and plan.stalled == {"m": "v2"}
    assert "roll-out stopped" in (plan.models["m"].rollout or "")
    # A new change (v3) rolls again, and the failure is forgotten.
    plan = _plan(nodes, old, _model(2), specs={"m": {"one": "v3"}}, stalled={"m": "v2"})
    assert len(_starts(plan)) == 1 and plan.stalled == {}


def test_a_replica_on_a_profile_the_model_dropped_is_rolled() -> None:
    nodes = [_node("n1", gpus=4)]
    gone_profile = [_rep("r-0", "n1", profile="old")]
    plan = _plan(nodes, gone_profile, _model(1), specs={"m": {"one": "v1"}})
    assert [a.profile for a in _starts(plan)] == ["one"] and _stops(plan) == {}


# ---------------------------------------------------------------- consolidation

TWO_PROFILES = [
    {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
    {"name": "a100", "gpus": 1, "gpu_models": ["A100"]},
]


def test_a_replica_on_its_second_profile_moves_back_when_the_first_fits() -> None:
    nodes = [_node("h", gpus=1), _node("a", gpus=1, model=A100)]
    fallback = [_rep("r-a", "a", profile="a100")]
    plan = _plan(nodes, fallback, _model(1, TWO_PROFILES))
    starts = _starts(plan)
    assert [(s.profile, s.shards[0].node) for s in starts] == [("h100", "h")]
    assert _stops(plan) == {}  # make-before-break: the old one serves until the new runs
    new = {**_rep("r-h", "h", profile="h100", state="starting"), "created_at": NOW}
    plan = _plan(nodes, [*fallback, new], _model(1, TWO_PROFILES))
    assert plan.actions == []
    running = {**new, "state": "running"}
    plan = _plan(nodes, [*fallback, running], _model(1, TWO_PROFILES))
    assert _stops(plan) == {"r-a": "consolidation: replaced by a replica on a better placement"}
    assert _starts(plan) == []


def test_consolidation_never_churns_and_is_rate_limited() -> None:
    nodes = [_node("h", gpus=1), _node("a", gpus=1, model=A100)]
    fallback = [_rep("r-a", "a", profile="a100")]
    # Just ready (within min_lifetime_s): left alone.
    fresh = [{**fallback[0], "ready_at": "2026-12-02T09:59:00Z"}]
    assert _plan(nodes, fresh, _model(1, TWO_PROFILES)).actions == []
    # No room on the preferred profile: nothing (never by preemption).
    busy = [_node("h", gpus=0), _node("a", gpus=1, model=A100)]
    assert _plan(busy, fallback, _model(1, TWO_PROFILES)).actions == []
    # Turned off.
    off = _plan(nodes, fallback, _model(1, TWO_PROFILES), settings={"consolidate_per_pass": 0})
    assert off.actions == []
    # On the preferred profile already: never moved to the other.
    home = [_rep("r-h", "h", profile="h100")]
    assert _plan(nodes, home, _model(1, TWO_PROFILES)).actions == []
    # Two models' worth of moves, one per pass.
    nodes4 = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    two = [_rep("r-a0", "a", profile="a100"), _rep("r-a1", "a", profile="a100", gpu=1)]
    plan = _plan(nodes4, two, _model(2, TWO_PROFILES))
    assert len(_starts(plan)) == 1 and _stops(plan) == {}


def test_a_whole_roll_out_converges_never_below_min_and_then_rests() -> None:
    nodes = [_node("n1", gpus=4), _node("n2", gpus=4)]
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(4)]
    plans = _simulate(nodes, old, _model(4), 12, specs={"m": {"one": "v2"}})
    final = plans[-1]
    assert final.actions == [] and final.models["m"].rollout is None
    started = sum(len(_starts(p)) for p in plans)
    stopped = sum(len(_stops(p)) for p in plans)
    assert started == 4 and stopped == 4  # each replica replaced exactly once: no churn
    assert all(len(_starts(p)) <= 1 for p in plans)  # surge 1


def test_consolidation_converges_without_churn() -> None:
    nodes = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    fallback = [_rep("r-a0", "a", profile="a100"), _rep("r-a1", "a", profile="a100", gpu=1)]
    plans = _simulate(nodes, fallback, _model(2, TWO_PROFILES), 10)
    assert plans[-1].actions == []
    assert sum(len(_starts(p)) for p in plans) == 2  # each moved once, never back
