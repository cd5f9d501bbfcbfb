"""The convergence oracles find what they are for (a ring of three models, a room preempted
twice, a run past the bound), and seeded runs of generated scenarios find nothing: a
derandomised slice here, a longer one marked slow, the whole hunt in bench/hunt.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from convergence import (
    CYCLE,
    NEVER_QUIET,
    OVER_BOUND,
    QUIET,
    TURNS,
    TWICE,
    Finding,
    Watch,
    bound,
    hunt,
)
from preemption_snapshots import model, node, replica, snap

from scheduler.core.models import Hold, Plan, Snapshot, StartAction, StopAction
from scheduler.core.plan_records import ModelStatus

RING = ("a", "b", "c")
LATER = "2026-12-02T10:05:00Z"


def on_g0(name: str, rid: str, **extra: Any) -> Snapshot:
    """One GPU, held by `name`'s replica `rid`; three models of one class want it."""
    return snap(
        nodes=[node("n0", 1)],
        models=[model(m, "standard", "org/a") for m in RING],
        replicas=[replica(rid, name, [("n0", ["n0-g0"])])],
        **extra,
    )


def takes_over(s: Snapshot, taker: str, new_id: str) -> Plan:
    """The plan that stops the replica on n0-g0 for `taker` and starts `taker` there."""
    victim = s.replicas[0]
    stop = StopAction(
        replica=victim.id, model=victim.model, reason="preempted", preempted_for=taker
    )
    start = StartAction(
        model=taker, profile="p", replica=new_id, shards=victim.shards, reason="scale up"
    )
    status = {m: ModelStatus(desired=1, live=int(m == victim.model)) for m in RING}
    hold = Hold.model_validate({"until": LATER, "for": taker})
    return Plan(actions=[stop, start], models=status, holds={victim.model: hold})


def kinds(findings: list[Finding]) -> set[str]:
    return {f.kind for f in findings}


def test_a_ring_of_three_models_is_a_cycle_that_no_pair_shows() -> None:
    watch = Watch()
    holder, n = "a", 0
    for _ in range(4):  # a -> b -> c -> a -> b
        taker = RING[(RING.index(holder) + 1) % 3]
        s = on_g0(holder, f"r{n}")
        watch.observe(s, takes_over(s, taker, f"r{n + 1}"))
        holder, n = taker, n + 1
    assert kinds(watch.findings) == {CYCLE}
    assert "pass 3 is pass 0 again (3 passes with changes)" in watch.findings[0].detail


def test_the_same_state_with_other_changes_is_not_a_cycle() -> None:
    watch = Watch()
    first = on_g0("a", "r0")
    watch.observe(first, takes_over(first, "b", "r1"))
    later = on_g0("a", "r2")
    watch.observe(later, takes_over(later, "c", "r3"))
    assert watch.findings == []


def test_a_pair_taking_turns_is_found() -> None:
    watch = Watch()
    s = on_g0("a", "r0")
    watch.observe(s, takes_over(s, "b", "r1"))
    s = on_g0("b", "r1")
    watch.observe(s, takes_over(s, "a", "r2"))
    assert kinds(watch.findings) == {TURNS}


def test_a_model_preempted_again_for_the_same_room_within_its_hold_is_found() -> None:
    def stop_only(s: Snapshot) -> Plan:  # b never starts: its room went elsewhere
        plan = takes_over(s, "b", "r1")
        return plan.model_copy(update={"actions": plan.actions[:1]})

    watch = Watch()
    watch.observe(on_g0("a", "r0"), stop_only(on_g0("a", "r0")))
    s = on_g0("a", "r2", now="2026-12-02T10:02:00Z")
    watch.observe(s, stop_only(s))
    assert TWICE in kinds(watch.findings)
    # Had b started in between (or beside it), the room reached it: more room is not TWICE.
    watch = Watch()
    watch.observe(on_g0("a", "r0"), stop_only(on_g0("a", "r0")))
    s = on_g0("a", "r2", now="2026-12-02T10:02:00Z")
    watch.observe(s, takes_over(s, "b", "r3"))
    assert watch.findings == []
    # Nor once the hold has ended.
    watch = Watch()
    watch.observe(on_g0("a", "r0"), stop_only(on_g0("a", "r0")))
    s = on_g0("a", "r2", now=LATER)
    watch.observe(s, stop_only(s))
    assert TWICE not in kinds(watch.findings)


def test_a_run_past_the_bound_or_never_quiet_is_found() -> None:
    quiet = on_g0("a", "r0")
    idle = Plan(models={m: ModelStatus(desired=1, live=int(m == "a")) for m in RING})
    watch = Watch()
    for n in range(bound(quiet) + 1):  # every pass a different change, then quiet
        s = on_g0("a", f"r{n}")
        watch.observe(s, takes_over(s, RING[n % 2 + 1], f"x{n}"))
    for _ in range(QUIET):
        watch.observe(quiet, idle)
    assert kinds(watch.finish()) >= {OVER_BOUND}
    watch = Watch()
    for _ in range(QUIET):
        watch.observe(quiet, idle)
    watch.observe(quiet, takes_over(quiet, "b", "r1"))
    assert kinds(watch.finish()) == {NEVER_QUIET}


def check_seeds(seeds: range, passes: int = 30) -> None:
    for seed in seeds:
        watch = hunt(seed, passes)
        assert watch is None or not watch.findings, (seed, watch.findings)


def test_seeded_runs_converge_within_the_bound() -> None:
    check_seeds(range(60))


@pytest.mark.slow
def test_seeded_runs_converge_within_the_bound_long() -> None:
    check_seeds(range(60, 3060))


def test_the_hunt_counts_both_sides_alike() -> None:
    """bench/hunt.py at a tiny size, against this very checkout: the same counts twice."""
    root = Path(__file__).resolve().parents[2]
    args = ["--scenarios", "3", "--passes", "3", "--against", str(root)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.hunt", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    this, against = out["this"], out["against"]
    assert this["runs"] == against["runs"] == 3
    assert this["passes_with_changes"] == against["passes_with_changes"]
    assert set(this["found"]) == {CYCLE, TURNS, TWICE, NEVER_QUIET, OVER_BOUND, "oracle"}
