"""The chain places alike whether a filter or scorer is called natively or through the
plugin protocol, and whatever plugins are registered beside the built-ins.

Static verdicts are kept per profile and node shape. An extra static filter that does not
declare what it reads makes them per node; one that does (`Keyed`) keeps them per shape, its
key added. The dynamic filters and scorers are one chain (chain.py), built-ins first: a
registered dynamic filter makes every visit walk with a Choice. Extra filters that never say
no must not change a single byte of the plan, and a declared filter must place exactly as
the same filter undeclared.
"""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import HealthCheck, given, settings

from bench.filter_verdicts import DeclaredZoneRule, ZoneRule
from bench.fleetgen import steady_snapshot
from scheduler.core.chain import Chain, PluginFilter, PluginScorer
from scheduler.core.decide import decide
from scheduler.core.inventory import Inventory, NodeState
from scheduler.core.models import Node, Plan, Snapshot
from scheduler.core.placement import Placer, commit
from scheduler.core.plugins import (
    Choice,
    Filter,
    Keyed,
    PlaceContext,
    Plugins,
    Scorer,
    default_filters,
    default_scorers,
)
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import parse_snapshot
from tests.core.scenario_gen import Scenario, scenarios
from tests.core.scenario_runs import passes


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


class AllowStaticKeyed(AllowStatic):
    profile_fields: tuple[str, ...] | None = ()

    def shape_key(self, node: Node) -> Hashable:
        return None


PLUGIN_PATHS = [
    Plugins(filters=[AllowStatic(), AllowDynamic()]),  # per node, dynamic ones as plugins
    Plugins(filters=[AllowStatic()]),  # per node, dynamic fast path
    Plugins(filters=[AllowStaticKeyed()]),  # per shape and key, dynamic fast path
    Plugins(filters=[AllowStaticKeyed(), AllowDynamic()]),
]


def _same(snap: Snapshot, fast: Plan) -> None:
    for plugins in PLUGIN_PATHS:
        slow = decide(snap, plugins)
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


def test_variants_of_a_cheapest_profile_keep_their_own_verdicts_on_the_plugin_path() -> None:
    """`placement: cheapest` tries a profile narrowed to each GPU type under the same name:
    per-(model, profile) verdicts must not hand the unnarrowed verdict to the variants (they
    did: with any extra filter the dearer H100 was taken)."""
    nodes = [
        {"id": n, "name": n, "cpu_cores": 64, "memory_gb": 512,
         "gpus": [{"id": f"{n}-g{i}", "model": m, "memory_gb": 80} for i in range(2)]}
        for n, m in (("a", "NVIDIA H100 80GB HBM3"), ("b", "NVIDIA A100-SXM4-80GB"))
    ]  # fmt: skip
    snap = parse_snapshot(
        {
            "now": "2026-12-02T10:00:00Z",
            "nodes": nodes,
            "settings": {"gpu_costs": {"H100": 4.0, "A100": 1.5}},
            "models": [
                {"name": "m", "owner": "org/a", "placement": "cheapest",
                 "scaling": {"min": 1, "max": 1}, "profiles": [{"name": "any", "gpus": 1}]}
            ],
        }
    )  # fmt: skip
    plan = decide(snap)
    assert [s.node for a in plan.actions if a.op == "start" for s in a.shards] == ["b"]
    _same(snap, plan)


def test_a_filter_that_says_no_is_heard_on_the_plugin_path() -> None:
    """The comparison above is not vacuous: the plugin path does run the extra filters."""

    class Refuse(AllowStatic):
        def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
            return "refused"

    snap = steady_snapshot(60, seed=0)
    plan = decide(snap, Plugins(filters=[Refuse()]))
    assert not [a for a in plan.actions if a.op == "start"]


# ---------------------------------------------------------------- declared shape keys


class DeclaredReadsModel(DeclaredZoneRule):
    """Declares it may read the model too: shared by alike nodes, per (model, profile)."""

    profile_fields = None


class TooCoarse(ZoneRule):
    """Declares less than it reads (not the zone): nodes of other zones get its verdict."""

    profile_fields: tuple[str, ...] | None = ("gpus", "mig_profile")

    def shape_key(self, node: Node) -> Hashable:
        return None


class DropFirstGPU(AllowStatic):
    """Declared, but narrows by GPU id (drops the lowest id), not by model and memory: its
    verdict must be kept per node whatever it declares, or other nodes lose the wrong GPU."""

    name = "drop-first"
    profile_fields: tuple[str, ...] | None = ()

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        choice.gpus = sorted(choice.gpus, key=lambda g: g.id)[1:]
        return None

    def shape_key(self, node: Node) -> Hashable:
        return None


class DropFirstUndeclared(DropFirstGPU):
    shape_key = None  # type: ignore[assignment]  # not a declaration: no method


def _plans(snap: Snapshot, f: Filter, steps: int = 2) -> list[str]:
    out = []
    for _ in range(steps):
        plan = decide(snap, Plugins(filters=[f]))
        out.append(plan.model_dump_json())
        snap = apply_plan(snap, plan, 30)
    return out


def test_the_declared_filters_are_keyed_and_the_others_not() -> None:
    assert isinstance(DeclaredZoneRule(), Keyed) and isinstance(TooCoarse(), Keyed)
    assert not isinstance(ZoneRule(), Keyed) and not isinstance(AllowStatic(), Keyed)
    assert isinstance(DropFirstGPU(), Keyed) and not isinstance(DropFirstUndeclared(), Keyed)


def test_a_declared_filter_places_as_undeclared_with_fewer_static_runs() -> None:
    for nodes, seed in ((60, 0), (200, 1)):
        snap = steady_snapshot(nodes, seed=seed)
        undeclared, declared, per_model = ZoneRule(), DeclaredZoneRule(), DeclaredReadsModel()
        plans = _plans(snap, undeclared)
        assert plans == _plans(snap, declared) == _plans(snap, per_model)
        assert any("zone-rule" in p for p in plans), "the filter never said no: proves little"
        # Verdicts shared by alike nodes of a zone: far fewer runs than one per node.
        assert declared.calls * 5 < undeclared.calls, (declared.calls, undeclared.calls)
        assert declared.calls < per_model.calls < undeclared.calls


def test_a_shape_key_that_declares_less_than_the_filter_reads_changes_the_plan() -> None:
    """The comparison above can fail: leave the zone out of the key and plans differ."""
    snap = steady_snapshot(200, seed=1)
    assert _plans(snap, TooCoarse()) != _plans(snap, ZoneRule())


def test_a_narrowing_by_gpu_id_is_kept_per_node_though_declared() -> None:
    snap = steady_snapshot(60, seed=0)
    assert _plans(snap, DropFirstGPU()) == _plans(snap, DropFirstUndeclared())


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_generated_scenarios_place_alike_with_the_filter_declared_or_not(scn: Scenario) -> None:
    for snap, _ in passes(scn):
        undeclared = decide(snap, Plugins(filters=[ZoneRule()]))
        declared = decide(snap, Plugins(filters=[DeclaredZoneRule()]))
        assert declared.model_dump_json() == undeclared.model_dump_json()
        by_id = decide(snap, Plugins(filters=[DropFirstGPU()]))
        assert (
            by_id.model_dump_json()
            == decide(snap, Plugins(filters=[DropFirstUndeclared()])).model_dump_json()
        )


class Asked:
    """A built-in filter or scorer behind the plugin protocol: not native to the chain."""

    def __init__(self, inner: Filter | Scorer) -> None:
        self.inner = inner
        self.name = inner.name
        self.static = getattr(inner, "static", False)

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> object:
        return self.inner.filter(ctx, node, choice)  # type: ignore[union-attr]

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float:
        return self.inner.score(ctx, node, choice)  # type: ignore[union-attr]


def test_the_built_ins_place_alike_natively_and_asked_as_plugins() -> None:
    """The chain calls the built-in filters and scorers natively; asked one by one through
    the plugin protocol, as a third party's, they place the same."""
    for nodes, seed in ((60, 0), (200, 1)):
        snap = steady_snapshot(nodes, seed=seed)
        filters: list[Filter] = [f if f.static else Asked(f) for f in default_filters()]
        scorers: list[Scorer] = [Asked(s) for s in default_scorers()]
        in_line = Placer(default_filters(), default_scorers(), len(snap.nodes))
        asked = Placer(filters, scorers, len(snap.nodes))
        chain = Chain(filters, scorers)
        assert all(isinstance(f, PluginFilter) for f in chain.filters)
        assert all(isinstance(s, PluginScorer) for s in chain.scorers)
        assert not any(isinstance(f, PluginFilter) for f in in_line.chain.filters)
        inv_a, inv_b = Inventory.build(snap), Inventory.build(snap)
        placed = 0
        for m in snap.models:
            a = in_line.place(m, inv_a).placement
            b = asked.place(m, inv_b).placement
            assert (a and [(s.node, s.gpus) for s in a.shards]) == (
                b and [(s.node, s.gpus) for s in b.shards]
            ), m.name
            if a is not None and b is not None:
                commit(m, a, inv_a)
                commit(m, b, inv_b)
                placed += 1
        assert placed > 20, "too few placements to compare"
