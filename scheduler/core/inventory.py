"""The capacity of the fleet in a pass: free devices per node, CPU, memory, quota usage.

Indexed so placement visits only nodes that could hold a shard (node_index.NodeIndex): by
free whole GPUs and node kind, and by the MIG profiles they have a free slice of, so a walk
over them is the same for the same snapshot. `clone()` is copy-on-write per node, for
trying a set of preemption victims without touching the real inventory. What does not change
in a pass (catalog, replicas, quotas) is in `facts` (facts.PassFacts), shared by every clone.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter

from scheduler.core.facts import (
    ZERO,
    NodeUse,
    PassFacts,
    Shape,
    Vec,
    _gpu_kinds,
    _or,
    add,
    collect,
    limit_exceeded,
    owner_prefixes,
    profile_need,
    shard_held,
)
from scheduler.core.models import GPU, MigSlice, Model, Node, Profile, Snapshot
from scheduler.core.node_devices import devices_of
from scheduler.core.node_index import NodeIndex, NodeMap

# Re-exported: the core imports these from here as well.
__all__ = [
    "ZERO",
    "Inventory",
    "NodeState",
    "PassFacts",
    "Shape",
    "Vec",
    "owner_prefixes",
    "profile_need",
    "shard_held",
]

_BY_ID = attrgetter("id")


class NodeState:
    """A node's capacity in a pass (a plain class: see facts.NodeUse)."""

    def __init__(
        self,
        node: Node,
        free_gpus: list[GPU],
        free_slices: dict[str, list[MigSlice]],
        free_cpu: float,
        free_mem: float,
        used_units: int,
        total_units: int,
        per_model: dict[str, int],
        shape: Shape,
        kind: int,
    ) -> None:
        self.node = node
        self.free_gpus = free_gpus  # whole, healthy, not in MIG mode, unused; by id
        self.free_slices = free_slices  # MIG profile -> healthy unused slices, by id
        self.free_cpu = free_cpu
        self.free_mem = free_mem
        self.used_units = used_units  # devices in use, for bin-packing
        self.total_units = total_units
        self.per_model = per_model  # replicas per model on this node, for spreading
        # What the built-in static filters read of a node (eligibility, each device's model,
        # memory and health): nodes of one shape get one verdict per profile.
        self.shape = shape
        self.kind = kind  # its shape's number in the pass (Inventory.kinds)

    def copy(self) -> NodeState:
        return NodeState(
            self.node,
            list(self.free_gpus),
            {k: list(v) for k, v in self.free_slices.items()},
            self.free_cpu,
            self.free_mem,
            self.used_units,
            self.total_units,
            dict(self.per_model),
            self.shape,
            self.kind,
        )


@dataclass
class Inventory:
    """The capacity of the fleet as a pass and its trials change it. What does not change
    (the catalog, the replicas, quotas) is in `facts`, shared by every clone."""

    facts: PassFacts
    nodes: NodeMap[NodeState]  # by node id; a clone shares its parent's until it changes one
    index: NodeIndex  # eligible nodes by what they have free; shared until a clone changes it
    # One node of each kind (node shape), by kind number: what static filters need of a kind.
    kinds: list[NodeState]
    usage: dict[str, Vec]  # per owner path prefix
    released: set[str] = field(default_factory=set)  # replicas given back in this trial
    _owned: set[str] = field(default_factory=set)  # node ids this copy may mutate in place
    # Bumped on every change, so what was worked out about a state can be reused while it holds.
    version: int = 0
    # One clock for an inventory and all its clones, so no two states share a version.
    _clock: list[int] = field(default_factory=lambda: [0])
    # Which node each change touched, at which version: so that work can be brought up to date.
    _log_versions: list[int] = field(default_factory=list)
    _log_nodes: list[str] = field(default_factory=list)
    # A clone's nodes given back while it still shares its parent's index: how each was filed.
    _stale: dict[str, tuple[int, list[str]]] | None = None

    # ------------------------------------------------------------ building

    @classmethod
    def build(cls, snap: Snapshot) -> Inventory:
        """The capacity at the start of the pass, with the pass's facts."""
        walked = collect(snap)
        used, on_node = walked.used, walked.on_node
        nothing = NodeUse(0.0, 0.0, {}, [])
        nodes: dict[str, NodeState] = {}
        per_kind: dict[int, int] = {}  # nodes of each kind
        kinds: list[NodeState] = []
        kind_of: dict[Shape, int] = {}
        slice_kinds: dict[str, int] = {}  # healthy slices on eligible nodes by MIG profile
        for node in sorted(snap.nodes, key=lambda n: n.id):
            free_gpus, free_slices, used_units, total, shape = devices_of(node, used, slice_kinds)
            kind = kind_of.get(shape)  # a shape is hashed once a node: tuples keep no hash
            if kind is None:
                kind = kind_of[shape] = len(kind_of)
            else:
                shape = kinds[kind].shape  # the first node's: this one's is freed at once
            per_kind[kind] = per_kind.get(kind, 0) + 1
            free_gpus.sort(key=_BY_ID)
            for lst in free_slices.values():
                lst.sort(key=_BY_ID)
            use = on_node.get(node.id, nothing)
            nodes[node.id] = NodeState(
                node,
                free_gpus,
                free_slices,
                node.cpu_cores - use.cpu,
                node.memory_gb - use.memory,
                used_units,
                total,
                use.per_model if use is not nothing else {},
                shape,
                kind,
            )
            if kind == len(kinds):
                kinds.append(nodes[node.id])
        gpu_kinds = _gpu_kinds({shape: per_kind[k] for shape, k in kind_of.items()})
        facts = PassFacts(
            models=walked.models,
            replicas=walked.replicas,
            by_model=walked.by_model,
            live=walked.live,
            current=walked.current,
            stale=walked.stale,
            starting=walked.starting,
            stopping_preempted=walked.stopping_preempted,
            single={nid: use.single for nid, use in on_node.items() if use.single},
            profiles_held=walked.profiles_held,
            quotas={q.owner: q for q in snap.quotas},
            limits={q.owner: q.limit for q in snap.quotas if q.limit is not None},
            slice_share=walked.slice_share,
            gpu_kinds=gpu_kinds,
            slice_kinds=slice_kinds,
            capacity=walked.capacity,
        )
        inv = cls(facts, NodeMap(nodes), NodeIndex(), kinds, walked.usage, set(), set(nodes))
        for ns in nodes.values():
            inv._index(ns)
        return inv

    def clone(self) -> Inventory:
        """A copy for a trial; it must be done with before the original changes again."""
        self._materialize()
        twin = Inventory(
            self.facts,
            self.nodes.fork(),
            self.index,  # shared until the twin walks or takes (see _materialize)
            self.kinds,
            dict(self.usage),
            set(self.released),
            set(),
            self.version,
            self._clock,
        )
        twin._stale = {}
        return twin

    # ------------------------------------------------------------ index

    def _materialize(self) -> None:
        """A clone shares its parent's index until it needs its own: most preemption trials
        only give back and ask a few nodes, never walk the index."""
        if self._stale is None:
            return
        self.index = self.index.fork()
        for nid, (count, profiles) in self._stale.items():
            self.index.unfile(nid, count, self.nodes[nid].kind, profiles)
            self._index(self.nodes[nid])
        self._stale = None

    def _index(self, ns: NodeState) -> None:
        if ns.node.eligible:
            slices = [prof for prof, lst in ns.free_slices.items() if lst]
            self.index.file(ns.node.id, len(ns.free_gpus), ns.kind, slices)

    def _unindex(self, ns: NodeState) -> None:
        self.index.unfile(ns.node.id, len(ns.free_gpus), ns.kind, ns.free_slices)

    def _mutable(self, node_id: str) -> NodeState:
        ns = self.nodes[node_id]
        if node_id not in self._owned:
            ns = ns.copy()
            self.nodes[node_id] = ns
            self._owned.add(node_id)
        return ns

    def kinds_accepted(self, accepts: Callable[[NodeState], bool]) -> frozenset[int]:
        """The node kinds whose nodes `accepts` (asked of one node of each)."""
        return frozenset(k for k, ns in enumerate(self.kinds) if accepts(ns))

    def candidate_nodes(
        self, profile: Profile, kinds: frozenset[int] | None = None
    ) -> Iterator[str]:
        """Eligible nodes that have at least the free devices one shard of `profile` needs
        (and are of one of `kinds`, when given: the others are never visited). Single-node:
        the tightest fit first (fewest free GPUs that still suffice: best-fit for
        bin-packing). Multi-node: the roomiest first, since each later replica needs as many
        distinct nodes again and the roomiest can give a shard to the most of them.
        Lazy: a walk usually stops after a few; nothing may change the index meanwhile."""
        self._materialize()
        if profile.mig_profile is not None:
            yield from self.index.with_slice(profile.mig_profile)
            return
        yield from self.index.with_free(profile.gpus, profile.shards > 1, kinds)

    # ------------------------------------------------------------ changes

    def take(self, model: Model, profile: Profile, node_id: str, device_ids: list[str]) -> None:
        self._materialize()
        ns = self._mutable(node_id)
        self._unindex(ns)
        self._drop_free(ns, set(device_ids))
        ns.free_cpu -= profile.cpu_cores
        ns.free_mem -= profile.memory_gb
        ns.used_units += len(device_ids)
        ns.per_model[model.name] = ns.per_model.get(model.name, 0) + 1
        self._index(ns)
        self._changed(node_id)

    def _changed(self, *node_ids: str) -> None:
        """A new version, and which nodes it touched (for work to be brought up to date)."""
        self._clock[0] += 1
        self.version = self._clock[0]
        for node_id in node_ids:
            self._log_versions.append(self.version)
            self._log_nodes.append(node_id)

    def _drop_free(self, ns: NodeState, device_ids: set[str]) -> int:
        """Take devices off a node's free lists; how many of them were there."""
        before = len(ns.free_gpus) + sum(len(v) for v in ns.free_slices.values())
        ns.free_gpus = [g for g in ns.free_gpus if g.id not in device_ids]
        for prof, lst in ns.free_slices.items():
            ns.free_slices[prof] = [sl for sl in lst if sl.id not in device_ids]
        return before - len(ns.free_gpus) - sum(len(v) for v in ns.free_slices.values())

    def reserve(
        self, node_id: str, device_ids: list[str], cpu: float = 0.0, mem: float = 0.0
    ) -> list[str]:
        """Hold free devices (and CPU, memory) back from the rest of the pass: room kept for a
        model that preempted for it, so no other model takes it. Returns the devices that were
        free (and are held now)."""
        self._materialize()
        ns = self._mutable(node_id)
        self._unindex(ns)
        wanted = set(device_ids)
        held = [g.id for g in ns.free_gpus if g.id in wanted]
        held += [sl.id for lst in ns.free_slices.values() for sl in lst if sl.id in wanted]
        ns.used_units += self._drop_free(ns, wanted)
        ns.free_cpu -= cpu
        ns.free_mem -= mem
        self._index(ns)
        self._changed(node_id)
        return held

    def unreserve(self, node_id: str, device_ids: list[str], cpu: float, mem: float) -> None:
        """Give back what `reserve` held (the devices it returned), to the model it was kept
        for."""
        self._materialize()
        ns = self._mutable(node_id)
        self._unindex(ns)
        wanted = set(device_ids)
        for gpu in ns.node.gpus:
            if gpu.mig is None:
                if gpu.id in wanted:
                    ns.free_gpus.append(gpu)
                    ns.used_units -= 1
                continue
            for sl in gpu.mig:
                if sl.id in wanted:
                    ns.free_slices.setdefault(sl.profile, []).append(sl)
                    ns.used_units -= 1
        ns.free_gpus.sort(key=_BY_ID)
        for lst in ns.free_slices.values():
            lst.sort(key=_BY_ID)
        ns.free_cpu += cpu
        ns.free_mem += mem
        self._index(ns)
        self._changed(node_id)

    def is_free(self, node_id: str, device_id: str) -> bool:
        ns = self.nodes.get(node_id)
        if ns is None:
            return False
        return any(g.id == device_id for g in ns.free_gpus) or any(
            sl.id == device_id for lst in ns.free_slices.values() for sl in lst
        )

    def changed_since(self, version: int) -> set[str]:
        """Nodes that took or gave back something after `version`."""
        return set(self._log_nodes[bisect_right(self._log_versions, version) :])

    def charge(self, owner: str, amount: Vec) -> None:
        for p in owner_prefixes(owner):
            self.usage[p] = add(self.usage.get(p, ZERO), amount)
        self._changed()

    def release(self, replica_id: str) -> list[str]:
        """Give back what an existing replica holds (trials only; real stops wait for Nomad).
        Returns the nodes that got something back."""
        rep = self.facts.replicas.get(replica_id)
        if rep is None or replica_id in self.released:
            return []
        self.released.add(replica_id)
        model = self.facts.models.get(rep.model)
        prof = model.profile(rep.profile) if model else None
        cpu, mem = shard_held(model, prof)
        touched: list[str] = []
        gpus = 0.0
        for sh in rep.shards:
            gpus += self._count(sh.gpus)
            if sh.node not in self.nodes:
                continue
            touched.append(sh.node)
            ns = self._mutable(sh.node)
            if self._stale is None:
                self._unindex(ns)
            elif sh.node not in self._stale:  # filed as it was in the shared index
                self._stale[sh.node] = (len(ns.free_gpus), list(ns.free_slices))
            ns.free_cpu += _or(sh.cpu_cores, cpu)
            ns.free_mem += _or(sh.memory_gb, mem)
            ns.per_model[rep.model] = max(ns.per_model.get(rep.model, 0) - 1, 0)
            wanted = set(sh.gpus)
            for gpu in ns.node.gpus:
                if gpu.mig is None:
                    if gpu.id in wanted:
                        ns.used_units -= 1
                        if gpu.healthy:
                            ns.free_gpus.append(gpu)
                    continue
                for sl in gpu.mig:
                    if sl.id in wanted:
                        ns.used_units -= 1
                        if sl.healthy and gpu.healthy:
                            ns.free_slices.setdefault(sl.profile, []).append(sl)
            ns.free_gpus.sort(key=_BY_ID)
            for lst in ns.free_slices.values():
                lst.sort(key=_BY_ID)
            if self._stale is None:
                self._index(ns)
        if model is not None:
            n = len(rep.shards)
            for p in owner_prefixes(model.owner):
                self.usage[p] = add(self.usage.get(p, ZERO), (gpus, cpu * n, mem * n), -1.0)
        self._changed(*touched)
        return touched

    def _count(self, device_ids: list[str]) -> float:
        """GPUs a shard's devices count as: 1 each, a MIG slice its share (unknown ids: 1)."""
        return sum(self.facts.slice_share.get(d, 1.0) for d in device_ids)

    def quota_block(self, owner: str, need: Vec) -> str | None:
        """The first limit on the owner's path the need would exceed, as a sentence."""
        return limit_exceeded(self.facts.limits, self.usage, owner, need)
