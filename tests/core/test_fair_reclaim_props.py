"""Reclaim toward fair share (rules F3, R7) on generated owner mixes (bench.fair_share's): one
owner borrows the fleet, the others ask later; every pass keeps the quotas and the preemption
rules, a stop toward fair share never takes a minimum or a critical replica, and the owners
never take turns."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from plan_checks import check_quotas, check_stops
from scenario_gen import PROPS

from bench.fair_share import ideal_gpus, late_arrival, owner_mix, run
from scheduler.core.fairshare import water_fill
from scheduler.core.models import Plan, Snapshot, StopAction

PASSES = 30
QUIET = 10  # the last passes of a run take nothing toward fair share


def _fair_stops(plan: Plan) -> list[StopAction]:
    return [
        a for a in plan.actions if isinstance(a, StopAction) and a.code == "preempted_fair_share"
    ]


def check_fair_stops(snap: Snapshot, plan: Plan) -> None:
    """R7: a borrowed replica of another owner's model of the taker's class, never critical,
    never below its model's minimum once the plan's stops are done."""
    models = {m.name: m for m in snap.models}
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    for a in _fair_stops(plan):
        assert a.preempted_for is not None
        victim, taker = models[a.model], models[a.preempted_for]
        assert victim.class_ != "critical", a
        assert victim.class_ == taker.class_, a
        assert victim.owner != taker.owner, a
        assert "reclaimed toward fair share by " in a.reason, a
        live = sum(1 for r in snap.replicas if r.model == a.model and r.counts)
        gone = sum(1 for s in stops if s.model == a.model)
        assert live - gone >= victim.scaling.min, f"{a.model}: minimum taken"


def check_no_turns(runs: list[tuple[Snapshot, Plan]]) -> None:
    """No two owners take turns: between a pair, stops toward fair share change direction at
    most once (a taker may be taken from later only after others took from it first), and the
    run goes quiet."""
    owner = {m.name: m.owner for m in runs[0][0].models}
    directions: dict[tuple[str, str], list[bool]] = {}
    for _, plan in runs:
        for a in _fair_stops(plan):
            assert a.preempted_for is not None
            taker, victim = owner[a.preempted_for], owner[a.model]
            pair = (min(taker, victim), max(taker, victim))
            way = taker < victim
            seen = directions.setdefault(pair, [])
            if not seen or seen[-1] != way:
                seen.append(way)
    for pair, ways in directions.items():
        assert len(ways) <= 2, f"{pair} take turns: {ways}"
    assert not any(_fair_stops(plan) for _, plan in runs[-QUIET:]), "still reclaiming"


@settings(PROPS, max_examples=40)
@given(st.randoms(use_true_random=False))
def test_fair_reclaim_keeps_the_rules_and_never_takes_turns(rng: random.Random) -> None:
    first, everyone = owner_mix(rng, mixed_classes=True)
    note(everyone.model_dump_json())
    runs = late_arrival(first, everyone, PASSES)
    for snap, plan in runs:
        check_quotas(snap, plan)
        check_stops(snap, plan)
        check_fair_stops(snap, plan)
    check_no_turns(runs)


def test_generated_mixes_reach_reclaim() -> None:
    # The generator is worth its time only if reclaim toward fair share happens in it.
    rng = random.Random(1)
    reclaimed = 0
    for _ in range(10):
        first, everyone = owner_mix(rng)
        runs = late_arrival(first, everyone, PASSES)
        reclaimed += sum(len(_fair_stops(plan)) for _, plan in runs)
    assert reclaimed > 10


def test_the_bench_reports_deviations_against_the_ideal() -> None:
    out = run(6, 20, 0)
    assert out["mixes"] == 6 and out["turn_taking"] == 0
    dev = out["deviation_gpus"]
    assert 0 <= dev["p50"] <= dev["largest"] and out["within_a_replica"] <= 6


def test_the_bench_ideal_is_weighted_water_filling() -> None:
    gpus = [{"id": f"g{i}", "model": "H100", "memory_gb": 80} for i in range(10)]
    s = Snapshot.model_validate(
        {
            "now": "2026-12-02T10:00:00Z",
            "nodes": [{"id": "n1", "name": "n1", "cpu_cores": 64, "memory_gb": 512, "gpus": gpus}],
            "models": [
                {
                    "name": n,
                    "owner": o,
                    "scaling": {"max": hi},
                    "profiles": [{"name": "p", "gpus": 1}],
                }
                for n, o, hi in (("a", "org/a", 10), ("b", "org/b", 10), ("c", "org/c", 1))
            ],
            "quotas": [
                {"owner": "org/a", "guarantee": {"gpus": 1}, "weight": 2},
                {"owner": "org/b", "guarantee": {"gpus": 1}},
                {"owner": "org/c"},
            ],
        }
    )
    # c wants 1 and gets it; a and b their guarantee; the 7 left go 2:1 to a and b.
    want = {"org/a": 1 + 14 / 3, "org/b": 1 + 7 / 3, "org/c": 1.0}
    assert ideal_gpus(s) == pytest.approx(want)
    # The core's water-filling, for its stop sentences, agrees.
    claims = {"org/a": (1.0, 2.0, 10.0), "org/b": (1.0, 1.0, 10.0), "org/c": (0.0, 1.0, 1.0)}
    assert water_fill(10.0, claims) == pytest.approx(want)
