"""The built-in fast path and the plugin path place alike (issue 15).

With no extra filter the core asks the built-in filters through a fast path: static verdicts
per profile and node shape, the dynamic ones without a Choice. Any extra filter switches it
to the plugin path: verdicts per node and the built-in dynamic filters run as plugins. Extra
filters that never say no must not change a single byte of the plan.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.inventory import NodeState
from scheduler.core.models import Plan, Snapshot
from scheduler.core.plugins import Choice, PlaceContext, Plugins
from scheduler.core.simulate import apply_plan
from tests.core.test_core_properties import Scenario, passes, scenarios


class AllowStatic:
    name = "allow-static"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        return None


class AllowDynamic:
    name = "allow-dynamic"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        return None


PLUGIN_PATH = Plugins(filters=[AllowStatic(), AllowDynamic()])


def _same(snap: Snapshot, fast: Plan) -> None:
    slow = decide(snap, PLUGIN_PATH)
    assert slow.model_dump_json() == fast.model_dump_json()


def test_the_bench_fleets_get_the_same_plan_on_both_paths() -> None:
    for nodes, seed in ((60, 0), (60, 1), (200, 0)):
        snap = steady_snapshot(nodes, seed=seed)
        for _ in range(2):
            plan = decide(snap)
            assert plan.actions, "a steady fleet with nothing to do proves little"
            _same(snap, plan)
            snap = apply_plan(snap, plan, 30)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_generated_scenarios_get_the_same_plan_on_both_paths(scn: Scenario) -> None:
    for snap, plan in passes(scn):
        _same(snap, plan)


def test_a_filter_that_says_no_is_heard_on_the_plugin_path() -> None:
    """The comparison above is not vacuous: the plugin path does run the extra filters."""

    class Refuse(AllowStatic):
        def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
            return "refused"

    snap = steady_snapshot(60, seed=0)
    plan = decide(snap, Plugins(filters=[Refuse()]))
    assert not [a for a in plan.actions if a.op == "start"]
