"""The status oracle on plans that replace replicas make-before-break (rule L1) beside a
consolidation: drains, roll-outs, moves under way, removed profiles. The generated scenarios
have none, so these snapshots are drawn here: replicas on two profiles, some nodes draining, a
profile the model dropped, a new spec, moves under way; every plan must pass check_all."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lifecycle_snapshots import A100, H100, NOW, _node, _rep
from scenario_runs import dump
from status_checks import check_all

from scheduler.core.decide import decide
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import parse_snapshot

NODES = ["a", "b", "c", "d"]
PROFILES = [
    {"name": "one", "gpus": 1, "cpu_cores": 4, "memory_gb": 16, "gpu_models": ["H100"]},
    {"name": "alt", "gpus": 1, "cpu_cores": 4, "memory_gb": 16},
]


def _snapshot(replicas: list[dict[str, Any]], want: int, draining: set[str], **extra: Any):
    nodes = [
        {**_node(n, model=H100 if n in "ab" else A100), "draining": n in draining} for n in NODES
    ]
    model = {
        "name": "m",
        "owner": "org/a",
        "scaling": {"min": want, "max": want},
        "profiles": PROFILES,
    }
    body = {"now": NOW, "nodes": nodes, "models": [model], "replicas": replicas, **extra}
    body["settings"] = {"scale_down_window_s": 0}
    return parse_snapshot(body)


def test_a_drain_beside_a_move_under_way_is_a_correct_plan() -> None:
    """A move under way (r1 on the worse profile, its replacement r3 running) and a replica on
    a draining node (r2) whose replacement r4 is still starting. A drained replica is set apart
    before moves are renewed (rule L1), so it does not cover r1: nothing stops until r4 runs,
    then r1 and r2 both go. The sentence-sorting oracle counted r2 as live and wanted a
    scale-down."""
    reps = [
        _rep("r1", "c", profile="alt"),
        _rep("r2", "b"),
        _rep("r3", "a"),
        _rep("r4", "a", gpu=1, state="starting", created="2026-12-02T09:59:00Z"),
    ]
    snap = _snapshot(reps, 2, {"b"}, moves={"r1": "r3"})
    plan = decide(snap)
    assert not [a for a in plan.actions if a.op in ("stop", "start")]
    check_all(snap, plan)
    reps[3] = _rep("r4", "a", gpu=1, created="2026-12-02T09:59:00Z")  # r4 now runs
    snap = _snapshot(reps, 2, {"b"}, moves={"r1": "r3"})
    plan = decide(snap)
    stops = {a.replica: a.code for a in plan.actions if a.op == "stop"}
    assert stops == {"r1": "consolidation", "r2": "draining"}
    assert not [a for a in plan.actions if a.op == "start"]
    check_all(snap, plan)


@st.composite
def replaced_snapshots(draw: st.DrawFn) -> Any:
    slots = [(n, g) for n in NODES for g in (0, 1)]
    chosen = draw(st.lists(st.sampled_from(slots), min_size=1, max_size=6, unique=True))
    reps = []
    for i, (node, gpu) in enumerate(chosen):
        profile = "one" if node in "ab" else draw(st.sampled_from(["alt", "alt", "gone"]))
        state = draw(st.sampled_from(["running", "running", "starting"]))
        created = f"2026-12-02T0{draw(st.integers(0, 9))}:00:00Z"
        reps.append(_rep(f"r{i}", node, gpu=gpu, profile=profile, state=state, created=created))
    ids = [r["id"] for r in reps]
    moves = {}
    if len(ids) > 1 and draw(st.booleans()):
        old, new = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=2, unique=True))
        moves[old] = new
    draining = set(draw(st.lists(st.sampled_from(NODES), max_size=2)))
    # A new spec for a profile: its replicas on "v1" are rolled (a replica started in a pass
    # has no spec, which is never judged outdated).
    specs = {"m": {p: draw(st.sampled_from(["v1", "v2"])) for p in ("one", "alt")}}
    return _snapshot(
        reps,
        draw(st.integers(1, 3)),
        draining,
        moves=moves,
        specs=draw(st.just({}) | st.just(specs)),
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(replaced_snapshots())
def test_plans_that_replace_replicas_pass_the_oracle(snap: Any) -> None:
    for _ in range(4):
        plan = decide(snap)
        check_all(snap, plan)
        snap = apply_plan(snap, plan, 60.0)
        snap = parse_snapshot({**dump(snap), "moves": plan.moves, "stalled": plan.stalled})
