"""Nothing blocks without a word: a replacement under way is not growth the scale-down window
keeps (rule S2). Plan tests over passes: snapshot in, plan out."""

from __future__ import annotations

from lifecycle_snapshots import A100, _model, _node, _rep, _simulate, _starts, _stops

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
