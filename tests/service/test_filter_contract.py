"""Third-party filters meet the core's Filter protocol: `static` is declared, never guessed;
a declaration of what a static one reads is checked, each filter has a name of its own, and a
filter or scorer that fails never stops the pass."""

from __future__ import annotations

import zlib
from collections.abc import Hashable

import pytest
from structlog.testing import capture_logs

from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.inventory import NodeState
from scheduler.core.models import Node
from scheduler.core.plugins import Choice, Keyed, PlaceContext, Plugins
from scheduler.plugins import _declared


class Undeclared:
    """Says nothing of what it reads, and refuses every node."""

    name = "undeclared"

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, ctx: object, node: object, choice: object) -> str | None:
        self.calls += 1
        return "refused by a plugin"


class DeclaredStatic(Undeclared):
    static = True


def test_a_filter_that_does_not_declare_static_is_asked_on_every_visit() -> None:
    inner = Undeclared()
    f = _declared(inner)
    assert f.static is False and f.name == "undeclared"
    plan = decide(steady_snapshot(60, seed=0), Plugins(filters=[f]))
    assert inner.calls > 0
    assert not [a for a in plan.actions if a.op == "start"]
    tried = [t for s in plan.models.values() for t in s.tried]
    # Its "no" is counted under its name, with its words.
    said = [t.reasons["undeclared"] for t in tried if "undeclared" in t.short]
    assert said and all(list(s) == ["refused by a plugin"] for s in said)


def test_a_declared_filter_is_handed_on_with_its_declaration_and_verdicts() -> None:
    inner = DeclaredStatic()
    f = _declared(inner)
    assert f.static is True and f.name == "undeclared"
    assert _plan(f) == _plan(inner)
    assert inner.calls > 0


class Raises:
    """A third-party filter with a bug on some nodes."""

    name = "buggy"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        if zlib.crc32(node.node.id.encode()) % 2:
            raise KeyError("zone")
        return None


def test_a_filter_that_raises_refuses_that_node_and_the_pass_goes_on() -> None:
    f = _declared(Raises())
    with capture_logs() as logs:
        snap = steady_snapshot(60, seed=0)
        plan = decide(snap, Plugins(filters=[f]))
    # Placed, on nodes it said yes to only; the others refused under its name, with why.
    starts = [a for a in plan.actions if a.op == "start"]
    assert starts
    assert all(zlib.crc32(sh.node.encode()) % 2 == 0 for a in starts for sh in a.shards)
    tried = [t for s in plan.models.values() for t in s.tried if "buggy" in t.short]
    assert tried and all(list(t.reasons["buggy"]) == ["filter failed: KeyError"] for t in tried)
    assert [e["event"] for e in logs] == ["plugin_filter_failed"]  # once, not per node
    names = {n.id: n.name for n in snap.nodes}
    assert logs[0]["node_name"] == names[logs[0]["node"]]  # named, not only by its id


class ScorerRaises:
    name = "buggy-scorer"

    def __init__(self, result: object = None) -> None:
        self.result = result

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float:
        if self.result is None:
            raise RuntimeError("no metrics")
        return self.result  # type: ignore[return-value]


@pytest.mark.parametrize("result", [None, "high", float("nan")])
def test_a_scorer_that_fails_scores_nothing_and_the_pass_goes_on(
    monkeypatch: pytest.MonkeyPatch, result: object
) -> None:
    from scheduler import plugins

    def group(name: str) -> dict[str, object]:
        return {"s": ScorerRaises(result)} if name == plugins.SCORERS else {}

    monkeypatch.setattr(plugins, "load_group", group)
    with capture_logs() as logs:
        loaded = plugins.placement_plugins()
        assert loaded is not None
        snap = steady_snapshot(60, seed=0)
        assert decide(snap, loaded) == decide(snap)  # as without it: 0 everywhere
    assert [e["event"] for e in logs] == ["plugin_scorer_failed"]


# ---------------------------------------------------------------- declared shape keys


def _zone(node: Node) -> int:
    return zlib.crc32(node.id.encode()) % 3


class ZoneRule:
    """Static, reads the node's zone: zone 0 takes nothing over 2 GPUs a shard."""

    name = "zone-rule"
    static = True

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        if _zone(node.node) == 0 and ctx.profile.gpus > 2:
            return "zone 0 takes at most 2 GPUs a shard"
        return None


class Declared(ZoneRule):
    profile_fields = frozenset({"gpus"})  # any collection: the core gets a sorted tuple

    def shape_key(self, node: Node) -> Hashable:
        return _zone(node)


def _plan(f: object) -> str:
    return decide(steady_snapshot(60, seed=0), Plugins(filters=[f])).model_dump_json()  # type: ignore[list-item]


def test_a_good_declaration_is_handed_on_checked_and_shares_verdicts() -> None:
    f = _declared(Declared())
    assert isinstance(f, Keyed) and f.static is True and f.name == "zone-rule"
    assert f.profile_fields == ("gpus",)
    assert _plan(f) == _plan(ZoneRule())


class NotAMethod(ZoneRule):
    profile_fields = ("gpus",)
    shape_key = "zone"


class FieldsAString(Declared):
    profile_fields = "gpus"  # type: ignore[assignment]


class UnknownField(Declared):
    profile_fields = ("gpus", "zone")


class FieldsMissing(ZoneRule):
    def shape_key(self, node: Node) -> Hashable:
        return _zone(node)


def test_a_bad_declaration_is_logged_and_the_filter_asked_per_node() -> None:
    undeclared = _plan(ZoneRule())
    for bad, problem in (
        (NotAMethod(), "shape_key is not a method"),
        (FieldsAString(), "profile_fields 'gpus' is not a list of Profile field names"),
        (UnknownField(), "profile_fields names no Profile field: 'zone'"),
        (FieldsMissing(), "profile_fields missing (None: it reads the model)"),
    ):
        with capture_logs() as logs:
            f = _declared(bad)
        assert [(e["event"], e["problem"]) for e in logs] == [("plugin_shape_key_ignored", problem)]
        assert not isinstance(f, Keyed) and f.static is True and f.name == "zone-rule"
        assert _plan(f) == undeclared


class Flaky(Declared):
    """A shape key that fails on some nodes and cannot be hashed on others."""

    def shape_key(self, node: Node) -> Hashable:
        zone = _zone(node)
        if zone == 1:
            raise RuntimeError("no zone label")
        return [zone] if zone == 2 else zone  # type: ignore[return-value]  # a list: unhashable


def test_a_shape_key_that_fails_keys_its_node_alone_and_never_stops_the_pass() -> None:
    f = _declared(Flaky())
    assert isinstance(f, Keyed)
    with capture_logs() as logs:
        plan = _plan(f)
    assert plan == _plan(ZoneRule())
    assert [e["event"] for e in logs] == ["plugin_shape_key_failed"]  # once, not per node
    assert logs[0]["node_name"] and logs[0]["node_name"] != logs[0]["node"]


class Nameless:
    static = True

    def filter(self, ctx: object, node: object, choice: object) -> str | None:
        return None


class TakesABuiltinName(Nameless):
    name = "gpu-count"


def test_each_filter_is_counted_under_a_name_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler import plugins

    def group(name: str) -> dict[str, object]:
        found: dict[str, object] = {"a": Nameless, "b": TakesABuiltinName(), "c": Nameless()}
        return found if name == plugins.FILTERS else {}

    monkeypatch.setattr(plugins, "load_group", group)
    with capture_logs() as logs:
        loaded = plugins.placement_plugins()
    assert loaded is not None
    assert [f.name for f in loaded.filters] == ["Nameless", "gpu-count-2", "Nameless-2"]
    assert [e["event"] for e in logs] == ["plugin_name_taken", "plugin_name_taken"]
