"""What the static filters said, kept for one pass: one cache object for the placer.

Static filters read only a node's description and the profile, so their verdict holds for
the whole pass. The built-in ones read the profile fields in `profile_key` and the node's
`NodeState.shape`: nodes of one shape get one verdict per profile key, as Nomad keeps
feasibility per computed node class. An extra static filter may read anything, so with one
configured (`per_node`) the verdicts are kept per (model, profile) and per node instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from scheduler.core.inventory import Inventory, NodeState, Shape
from scheduler.core.models import Model, Profile


class Verdict(NamedTuple):
    """The static filters' answer for one node: why it can never hold the profile (`reason`),
    or which of its GPUs may serve it, by id (`ids`, extra filters ran) or by (model, memory)
    kind (`kinds`); both None: every healthy whole GPU."""

    reason: str | None
    ids: frozenset[str] | None = None
    kinds: frozenset[tuple[str, float]] | None = None


Key = tuple[object, ...]


def profile_key(model: Model, profile: Profile, per_node: bool) -> Key:
    """What the static filters read of a (model, profile): the built-in ones only the GPU
    count, memory, models and MIG profile; extra ones anything, so then the names."""
    if per_node:
        return (model.name, profile.name)
    models = tuple(profile.gpu_models) if profile.gpu_models is not None else None
    return (profile.gpus, profile.gpu_memory_gb, models, profile.mig_profile)


@dataclass
class Explained:
    """Why each node cannot hold one profile shape now, counted by reason; brought up to date
    from the inventory's log of changed nodes rather than worked out again."""

    inv: Inventory
    version: int
    reasons: dict[str, str | None]  # node id -> why it cannot hold the profile now
    counts: dict[str, int]  # reason -> nodes (None, a node that fits, is not counted)

    def set(self, node_id: str, reason: str | None) -> None:
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
    # (profile key, node shape) -> verdict: the shared answer for alike nodes.
    by_shape: dict[tuple[Key, Shape], Verdict] = field(default_factory=dict)
    # profile key -> node id -> verdict: what placement walks read, filled as nodes are met.
    by_node: dict[Key, dict[str, Verdict]] = field(default_factory=dict)
    # node shape -> its nodes (id order); static facts, so any inventory of the pass will do.
    members: dict[Shape, list[NodeState]] = field(default_factory=dict)
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
        ck = (key, ns.shape)
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
                self.members.setdefault(ns.shape, []).append(ns)
        return list(self.members.values())
