"""Plan after plan, every run reaches a fixed point within the bound, with no cycle of any
length, no two models taking turns and no model preempted twice for the same room, on
generated fleets, catalogs and quotas (scenario_gen's, and crowded ones: three or four
models on one or two small nodes), with default and with zero holds (the oracles:
convergence.py).

A hypothesis state machine: each step is one pass (decide, then apply the plan, stops taking
one pass or none, the clock moving 30 s to 5 min, the demand as it was); every plan is checked
against the rules (check_all); at the end the run goes on with nothing changing until it is
quiet. The suite runs a bounded, derandomized set; a longer hunt: LLM_SCHEDULER_HUNT=2000
pytest this file, or bench/hunt.py.
"""

from __future__ import annotations

import os

from convergence import DEFAULT, SETTLE, ZERO, Watch, contested, same_demand
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from scenario_crowded import crowded_scenarios
from scenario_gen import Scenario, scenarios
from scenario_runs import step
from status_checks import check_all

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot

HUNT = int(os.environ.get("LLM_SCHEDULER_HUNT", "0"))


class Passes(RuleBasedStateMachine):
    snap: Snapshot
    watch: Watch
    last: Plan | None

    @initialize(
        scn=scenarios(small_settings=True) | crowded_scenarios(),
        cfg=st.sampled_from([DEFAULT, ZERO]),
        load=st.sampled_from([40, 8, None]),
    )
    def start(self, scn: Scenario, cfg: dict[str, int], load: int | None) -> None:
        """A history built by the core itself (demand rising class by class, operators
        changing quotas, health, eligibility), then settings fixed and, from here on, the
        demand too (with a load, every model busy at once: they fight over the room)."""
        self.snap = contested(scn, cfg, load)
        self.watch = Watch()
        self.last = None

    def one_pass(self, advance_s: float, slow: bool) -> Plan:
        plan = decide(self.snap)
        check_all(self.snap, plan)
        self.watch.observe(self.snap, plan)
        assert not self.watch.findings, self.watch.findings
        self.snap = same_demand(step(self.snap, plan, advance_s, slow), advance_s)
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
        """On with nothing changing until quiet: within the bound, without a finding."""
        if not hasattr(self, "snap"):
            return
        for _ in range(SETTLE):
            if self.watch.settled():
                break
            self.one_pass(60.0, False)
        assert not self.watch.finish(), self.watch.findings


Passes.TestCase.settings = settings(
    max_examples=HUNT or 150,
    stateful_step_count=8,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestPasses = Passes.TestCase
