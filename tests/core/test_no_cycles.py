"""Plan after plan, every run reaches a fixed point and no two models take
turns, on generated fleets, catalogs and quotas, with default and with zero holds.

A hypothesis state machine: each step is one pass (decide, then apply the plan, stops taking
one pass or none, the clock moving 30 s to 5 min); every plan is checked against the rules
(check_all); at the end the run goes on with nothing changing until it is quiet. The suite
runs a bounded, derandomized set; a longer hunt: LLM_SCHEDULER_HUNT=2000 pytest this file.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from scenario_gen import Scenario, scenarios, ts
from scenario_runs import dump, passes, step
from status_checks import check_all

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot
from scheduler.core.validate import parse_snapshot

HUNT = int(os.environ.get("LLM_SCHEDULER_HUNT", "0"))
DEFAULT = {"eviction_grace_s": 300, "min_lifetime_s": 600, "preempt_hold_s": 300, "max_victims": 3}
ZERO = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0, "max_victims": 3}
QUIET = 5  # passes in a row without an action: a fixed point
SETTLE = 80  # passes allowed to get there once nothing changes any more


class Passes(RuleBasedStateMachine):
    snap: Snapshot
    turns: set[tuple[str, str]]
    last: Plan | None

    @initialize(
        scn=scenarios(small_settings=True),
        cfg=st.sampled_from([DEFAULT, ZERO]),
        load=st.sampled_from([40, 8, None]),
    )
    def start(self, scn: Scenario, cfg: dict[str, int], load: int | None) -> None:
        """A history built by the core itself (demand rising class by class, operators
        changing quotas, health, eligibility), then settings fixed and, from here on, the
        demand too (every model busy at once: they fight over the room)."""
        snap = [s for s, _ in passes(scn)][-1]
        data = dump(snap)
        data["settings"] = cfg
        if load is not None:
            data["demand"] = {
                m.name: {"inflight": load, "last_used": ts(snap.now)} for m in snap.models
            }
        self.snap = parse_snapshot(data)
        self.turns = set()
        self.last = None

    def one_pass(self, advance_s: float, slow: bool) -> Plan:
        plan = decide(self.snap)
        for victim, preemptor in check_all(self.snap, plan):
            # No replica of A is stopped for B after one of B was stopped for A.
            assert (preemptor, victim) not in self.turns, f"{victim} and {preemptor} take turns"
            self.turns.add((victim, preemptor))
        self.snap = step(self.snap, plan, advance_s, slow)
        self.last = plan
        return plan

    @rule(advance_s=st.sampled_from([60.0, 30.0, 120.0, 300.0]), slow=st.booleans())
    def a_pass(self, advance_s: float, slow: bool) -> None:
        self.one_pass(advance_s, slow)

    @invariant()
    def holds_name_models(self) -> None:
        if self.last is not None:
            names = {m.name for m in self.snap.models}
            assert all(h.for_ in names for h in self.last.holds.values())

    def teardown(self) -> None:
        if not hasattr(self, "snap"):
            return
        quiet = 0
        for _ in range(SETTLE):
            plan = self.one_pass(60.0, False)
            quiet = 0 if plan.actions else quiet + 1
            if quiet == QUIET:
                return
        raise AssertionError(f"no fixed point after {SETTLE} passes: {plan.actions}")


Passes.TestCase.settings = settings(
    max_examples=HUNT or 150,
    stateful_step_count=8,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestPasses = Passes.TestCase
