"""What the static filters said, kept for one pass: one cache object for the placer.

Static filters read only a node's description and the profile, so their verdict holds for
the whole pass. The built-in ones read the profile fields in `profile_key` and the node's
`NodeState.shape`: nodes of one shape get one verdict per profile key, as Nomad keeps
feasibility per computed node class. The cache files a shape by its number in the pass
(`NodeState.kind`): a small int hashes at once, a shape is a tuple of tuples hashed anew each
time. An extra static filter that declares what it reads
(`plugins.Keyed`) adds its `shape_key(node)` to the shape and its profile fields to the key
(`KeyedVerdicts`); one that does not may read anything, so with one configured (`per_node`)
the verdicts are kept per (model, profile) and per node instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from scheduler.core.inventory import Inventory, NodeState
from scheduler.core.models import Model, Node, Profile
from scheduler.core.plugins import Choice, Filter, Keyed, PlaceContext, Reason, reason_of


class Verdict(NamedTuple):
    """The static filters' answer for one node: why it can never hold the profile (`reason`),
    or which of its GPUs may serve it, by id (`ids`: held for this node only) or by (model,
    memory) kind (`kinds`); both None: every healthy whole GPU."""

    reason: Reason | None
    ids: frozenset[str] | None = None
    kinds: frozenset[tuple[str, float]] | None = None


Key = tuple[object, ...]


def profile_key(model: Model, profile: Profile, extra_fields: tuple[str, ...] | None) -> Key:
    """What the static filters read of a (model, profile): the built-in ones the GPU count,
    memory, models and MIG profile; declared extra ones the fields they name (`extra_fields`);
    None when some extra one may read anything of the model: then its names too."""
    models = tuple(profile.gpu_models) if profile.gpu_models is not None else None
    key: Key = (profile.gpus, profile.gpu_memory_gb, models, profile.mig_profile)
    if extra_fields is None:
        # With the built-in fields: `placement: cheapest` tries variants of one profile name.
        return (model.name, profile.name, *key)
    if extra_fields:
        key += tuple(_frozen(getattr(profile, f)) for f in extra_fields)
    return key


def _frozen(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


@dataclass
class Explained:
    """Why each node cannot hold one profile shape now, counted by filter and its words;
    brought up to date from the inventory's log of changed nodes rather than worked out again."""

    inv: Inventory
    version: int
    reasons: dict[str, Reason | None]  # node id -> why it cannot hold the profile now
    counts: dict[Reason, int]  # reason -> nodes (None, a node that fits, is not counted)

    def set(self, node_id: str, reason: Reason | None) -> None:
        old = self.reasons.get(node_id)
        if old is not None:
            self.counts[old] -= 1
        if reason is not None:
            self.counts[reason] = self.counts.get(reason, 0) + 1
        self.reasons[node_id] = reason


@dataclass
class VerdictCache:
    """Every static verdict of a pass, and what is derived from them."""

    run_static: Callable[[Model, Profile, NodeState], Verdict]
    per_node: bool
    # (profile key, node kind) -> verdict: the shared answer for alike nodes.
    by_shape: dict[tuple[Key, Hashable], Verdict] = field(default_factory=dict)
    # profile key -> node id -> verdict: what placement walks read, filled as nodes are met.
    by_node: dict[Key, dict[str, Verdict]] = field(default_factory=dict)
    # node kind -> its nodes (id order); static facts, so any inventory of the pass will do.
    members: dict[Hashable, list[NodeState]] = field(default_factory=dict)
    # profile key -> healthy devices on eligible nodes the profile could ever use.
    reach: dict[Key, int] = field(default_factory=dict)
    # (profile key, cpu, memory) -> the per-reason counts of nodes that cannot hold it.
    explained: dict[Key, Explained] = field(default_factory=dict)

    def of_node(self, key: Key) -> dict[str, Verdict]:
        found = self.by_node.get(key)
        if found is None:
            found = self.by_node[key] = {}
        return found

    def verdict(self, model: Model, profile: Profile, ns: NodeState, key: Key) -> Verdict:
        """The node's verdict, worked out once per shape (per node on the plugin path)."""
        if self.per_node:
            return self.run_static(model, profile, ns)
        ck = (key, ns.kind)
        found = self.by_shape.get(ck)
        if found is None:
            found = self.by_shape[ck] = self.run_static(model, profile, ns)
        return found

    def node_verdict(self, model: Model, profile: Profile, ns: NodeState, key: Key) -> Verdict:
        verdicts = self.of_node(key)
        found = verdicts.get(ns.node.id)
        if found is None:
            found = verdicts[ns.node.id] = self.verdict(model, profile, ns, key)
        return found

    def shapes(self, inv: Inventory) -> list[list[NodeState]]:
        """Nodes grouped by shape, or one group per node on the plugin path."""
        if self.per_node:
            return [[ns] for ns in inv.nodes.values()]
        if not self.members:
            for ns in inv.nodes.values():
                self.members.setdefault(ns.kind, []).append(ns)
        return list(self.members.values())


@dataclass
class KeyedVerdicts(VerdictCache):
    """Verdicts shared by nodes alike for every filter: the same shape and the same
    `shape_key(node)` of each declared extra filter. A verdict that narrows the GPUs by id
    (not by model and memory) holds for its own node only, so it is not shared."""

    shape_keys: Sequence[Callable[[Node], Hashable]] = ()
    # node id -> its shape with the declared keys: static facts, worked out once a pass.
    node_shapes: dict[str, Hashable] = field(default_factory=dict)

    def shape(self, ns: NodeState) -> Hashable:
        found = self.node_shapes.get(ns.node.id)
        if found is None:
            found = (ns.kind, *(k(ns.node) for k in self.shape_keys))
            self.node_shapes[ns.node.id] = found
        return found

    def shapes(self, inv: Inventory) -> list[list[NodeState]]:
        if not self.members:
            for ns in inv.nodes.values():
                self.members.setdefault(self.shape(ns), []).append(ns)
        return list(self.members.values())

    def verdict(self, model: Model, profile: Profile, ns: NodeState, key: Key) -> Verdict:
        ck = (key, self.shape(ns))
        found = self.by_shape.get(ck)
        if found is None:
            found = self.run_static(model, profile, ns)
            if found.ids is None:
                self.by_shape[ck] = found
        return found


class StaticRun:
    """The static filters of a pass, run on one node for one profile: what the verdict cache
    asks when it has no verdict for the node's shape (or, per_node, for the node) yet."""

    def __init__(self, static: list[Filter], narrow_by_id: bool, per_node: bool) -> None:
        self.static = static
        self.narrow_by_id = narrow_by_id  # an extra static filter: GPUs kept by id
        self.per_node = per_node  # the cache keeps verdicts per node

    def run(self, model: Model, profile: Profile, ns: NodeState) -> Verdict:
        """The static filters on a node's healthy whole GPUs: a reason, or which GPUs serve."""
        ctx = PlaceContext(model, profile)
        whole = [g for g in ns.node.gpus if g.mig is None and g.healthy]
        choice = Choice(gpus=whole)
        for f in self.static:
            said = reason_of(f.name, f.filter(ctx, ns, choice), static=True)
            if said is not None:
                return Verdict(said)
        if len(choice.gpus) == len(whole):
            return Verdict(None)  # all of them
        # The built-in filters keep or drop every GPU of one (model, memory) alike, so the kinds
        # kept say which serve on any node of the shape; an extra one may not.
        kinds = frozenset((g.model, g.memory_gb) for g in choice.gpus)
        if self.narrow_by_id and (
            self.per_node or sum((g.model, g.memory_gb) in kinds for g in whole) != len(choice.gpus)
        ):
            return Verdict(None, ids=frozenset(g.id for g in choice.gpus))
        return Verdict(None, kinds=kinds)


def verdict_cache(
    static: list[Filter], extra_static: Sequence[Filter]
) -> tuple[VerdictCache, tuple[str, ...] | None]:
    """The cache for a pass with these static filters (`extra_static` among them), and the
    Profile fields the extra ones read beyond the built-in ones' (profile_key's
    `extra_fields`): shared by shape when none is configured or all declare what they read,
    else per node and (model, profile)."""
    keyed = [f for f in extra_static if isinstance(f, Keyed)]
    per_node = len(keyed) < len(extra_static)
    # The cache asks a StaticRun, which refers to neither it nor the placer: a bound method of
    # the placer there would be a reference cycle, and a pass that leaves one is freed only by
    # the cyclic collector, later (tests/core/test_pass_garbage.py).
    run_static = StaticRun(static, bool(extra_static), per_node).run
    if per_node:
        return VerdictCache(run_static, per_node=True), None
    if not keyed:
        return VerdictCache(run_static, per_node=False), ()
    declared = [f.profile_fields for f in keyed]
    fields = None if None in declared else tuple(sorted({n for f in declared for n in f or ()}))
    shape_keys = [f.shape_key for f in keyed]
    return KeyedVerdicts(run_static, per_node=False, shape_keys=shape_keys), fields
