"""The core makes the decisions it made when golden_plans.json.gz was recorded: on the bench's
steady snapshots and on 1,000 generated scenarios, every plan is the same but for the fields
added since (golden_plans.ADDED)."""

from __future__ import annotations

from typing import Any

import pytest
from golden_plans import (
    BENCH,
    SCENARIOS,
    digest,
    load,
    record_bench,
    record_scenario,
    runs,
    scenario,
)


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return load()


def test_the_bench_snapshots_get_the_recorded_plans(golden: dict[str, Any]) -> None:
    for nodes, seed in BENCH:
        for plugins in (False, True):
            name = f"{nodes}-{seed}{'-plugins' if plugins else ''}"
            want, got = golden["bench"][name], record_bench(nodes, seed, plugins)
            assert got["snapshot"] == want["snapshot"], f"{name}: fleetgen changed (re-record)"
            if "whole" in want:
                assert got["whole"] == want["whole"], name
            assert got["plan"] == want["plan"], name


def test_generated_scenarios_get_the_recorded_plans(golden: dict[str, Any]) -> None:
    recorded = golden["scenarios"]
    assert len(recorded) == SCENARIOS
    changed = []
    for seed, want in enumerate(recorded):
        got = record_scenario(seed)
        if want is None or got is None:
            assert got == want, f"scenario {seed}: the strategy changed (re-record)"
            continue
        assert got["first"] == want["first"], f"scenario {seed}: the strategy changed"
        if "whole" in want:
            assert got["whole"] == want["whole"], f"scenario {seed}"
        if got["plans"] != want["plans"]:
            changed.append(seed)
    assert changed == []


def test_a_changed_decision_changes_the_digest() -> None:
    scn = scenario(1)
    assert scn is not None
    plans = [p for _, p in runs(scn, None)]
    starts = [p for p in plans if any(a.op == "start" for a in p.actions)]
    assert starts, "scenario 1 starts something"
    plan = starts[0]
    moved = plan.model_copy(update={"actions": plan.actions[1:]})
    assert digest([moved.model_dump(mode="json")]) != digest([plan.model_dump(mode="json")])
