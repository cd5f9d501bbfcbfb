"""Prefetch ahead of demand (rules PF1-PF3): keep a model's weights on `serve.prefetch` nodes
where it may land, with low-priority download jobs that never take a replica's room.

The last step of a pass: the room a prefetch may use is what the pass's starts left, so a
prefetch never keeps a replica out, and one whose node the starts now need is stopped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

from scheduler.core.fleet import Node
from scheduler.core.inventory import NodeState
from scheduler.core.models import Model, Profile
from scheduler.core.pass_state import PassState
from scheduler.core.plugins import memory_suffices, model_matches
from scheduler.core.prefetch_records import (
    Prefetch,
    PrefetchAction,
    PrefetchCode,
    PrefetchStatus,
)

# What one prefetch job asks of its node (the job's resources, scheduler/adapters).
PREFETCH_CPU_CORES = 0.5
PREFETCH_MEMORY_GB = 1.0


@dataclass
class _Room:
    """Per node, the CPU and memory the kept prefetches take of what the pass left."""

    cpu: dict[str, float] = field(default_factory=dict)
    mem: dict[str, float] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)  # nodes with a prefetch running or started
    kept: set[str] = field(default_factory=set)  # the running prefetches kept, by job id
    budget: int = 0  # prefetches that may still start (settings.prefetch_max)

    def take(self, node: str, cpu: float, mem: float) -> None:
        self.cpu[node] = self.cpu.get(node, 0.0) + cpu
        self.mem[node] = self.mem.get(node, 0.0) + mem
        self.busy.add(node)

    def fits(self, ns: NodeState, cpu: float, mem: float) -> bool:
        nid = ns.node.id
        left_cpu = ns.free_cpu - self.cpu.get(nid, 0.0)
        left_mem = ns.free_mem - self.mem.get(nid, 0.0)
        return left_cpu + 1e-9 >= cpu and left_mem + 1e-9 >= mem


def prefetch(st: PassState) -> tuple[list[PrefetchAction], dict[str, PrefetchStatus]]:
    """The pass's prefetch starts and stops, and each prefetching model's status."""
    snapshot = st.snapshot
    # A path in the container has nothing to download.
    wanting = [
        m
        for m in snapshot.models
        if m.serve is not None and m.serve.prefetch and not m.serve.source.startswith("/")
    ]
    if not wanting and not snapshot.prefetches:
        return [], {}
    models = {m.name: m for m in snapshot.models}
    actions, kept = _stops(st, models)
    room = _Room(kept={p.id for p in kept}, budget=snapshot.settings.prefetch_max - len(kept))
    for p in kept:
        room.take(p.node, p.cpu_cores, p.memory_gb)
    fleet = _Fleet(st, room)
    statuses: dict[str, PrefetchStatus] = {}
    for model in sorted(wanting, key=lambda m: m.name):
        starts, status = _model_prefetch(st, model, room, fleet)
        room.budget -= len(starts)
        actions += starts
        statuses[model.name] = status
    return actions, statuses


class _Fleet:
    """What every model's turn reads, worked out once per pass: the prefetches by model, and
    the nodes open to a prefetch (a reported cache, eligible, not draining, room for the job)
    by node kind, the most free cache bytes first. Where weights are cached, and their sizes,
    come from the pass's Warmth, which placement reads too: one index of the caches a pass."""

    def __init__(self, st: PassState, room: _Room) -> None:
        self.warmth = st.warmth
        self.prefetches: dict[str, list[Prefetch]] = {}
        for p in st.snapshot.prefetches:
            self.prefetches.setdefault(p.model, []).append(p)
        self.by_kind: dict[int, list[NodeState]] = {}
        for ns in st.inv.nodes.values():
            node = ns.node
            if node.cache is None or not node.eligible or node.draining or node.id in room.busy:
                continue
            if room.fits(ns, PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB):
                self.by_kind.setdefault(ns.kind, []).append(ns)
        for found in self.by_kind.values():
            found.sort(key=_best_first)
        self.kinds = st.inv.kinds

    def open_nodes(self, model: Model, size: int | None) -> Iterator[NodeState]:
        """The open nodes of the kinds one of the model's profiles may land on, best first,
        without those whose cache reports less room than `size` (the rest of a kind's known
        ones is no roomier: they are walked no further)."""
        kinds = [
            found
            for kind, found in self.by_kind.items()
            if any(_gpus_fit(p, self.kinds[kind].node) for p in model.profiles)
        ]
        for ns in heapq.merge(*kinds, key=_best_first):
            free = _free(ns)
            if size is not None and free is not None and free < size:
                break
            yield ns
        else:
            return
        # The rest of the known ones hold less: on to those that do not say (last in each).
        unknown = [[ns for ns in found if _free(ns) is None] for found in kinds]
        yield from heapq.merge(*unknown, key=_best_first)


def _free(ns: NodeState) -> int | None:
    return ns.node.cache.free_bytes if ns.node.cache is not None else None


def _best_first(ns: NodeState) -> tuple[int, str, str]:
    free = _free(ns)
    return (1 if free is None else -free, ns.node.name, ns.node.id)


def _current(p: Prefetch, model: Model | None) -> bool:
    """The prefetch is of what the model serves now, and the model still asks for one."""
    serve = model.serve if model is not None else None
    return (
        serve is not None
        and bool(serve.prefetch)
        and p.source == serve.source
        and p.revision == serve.revision
    )


def _stops(st: PassState, models: dict[str, Model]) -> tuple[list[PrefetchAction], list[Prefetch]]:
    """Rule PF2: running prefetches no longer wanted, and those whose node the pass's starts
    need (CPU or memory), stopped; the running ones kept."""
    actions: list[PrefetchAction] = []
    kept: list[Prefetch] = []
    room = _Room()
    for p in sorted(st.snapshot.prefetches, key=lambda p: p.id):
        if p.state != "running":
            continue
        if not _current(p, models.get(p.model)):
            actions.append(_stop(p, "prefetch_unwanted", "its model no longer asks for it"))
            continue
        ns = st.inv.nodes.get(p.node)
        if ns is None or not ns.node.eligible or ns.node.draining:
            why = "its node left the cluster, drains or takes nothing new"
            actions.append(_stop(p, "prefetch_unwanted", why))
            continue
        if not room.fits(ns, p.cpu_cores, p.memory_gb):
            actions.append(_stop(p, "prefetch_yields", "replicas need its node's CPU or memory"))
            continue
        room.take(p.node, p.cpu_cores, p.memory_gb)
        kept.append(p)
    return actions, kept


def _stop(p: Prefetch, code: PrefetchCode, why: str) -> PrefetchAction:
    return PrefetchAction(op="stop", model=p.model, node=p.node, id=p.id, code=code, reason=why)


def _model_prefetch(
    st: PassState, model: Model, room: _Room, fleet: _Fleet
) -> tuple[list[PrefetchAction], PrefetchStatus]:
    """Rule PF1 for one model: starts on the best candidates until `serve.prefetch` nodes
    hold, fetch or are about to fetch its weights, within the fleet's budget."""
    serve = model.serve
    assert serve is not None and serve.prefetch
    source, revision, wanted = serve.source, serve.revision, serve.prefetch
    mine = fleet.prefetches.get(model.name, [])
    ours = [p for p in mine if p.source == source and p.revision == revision]
    failed = sorted({p.node for p in ours if p.state == "failed"})
    running = {p.node for p in ours if p.id in room.kept}
    # The nodes whose cache holds the revision (NodeCache.holds), and those just fetched.
    cached = set(fleet.warmth.warm_set(model)) | {p.node for p in ours if p.state == "complete"}
    missing = wanted - len(cached | running)
    starts: list[PrefetchAction] = []
    short: str | None = None
    code: PrefetchCode | None = None
    if missing > 0 and room.budget <= 0:
        short, code = _limit(missing, st.settings.prefetch_max)
    elif missing > 0:
        skip = cached | running | set(failed) | _replica_nodes(st, model.name)
        size = fleet.warmth.weight_bytes(model)
        want = min(missing, room.budget)
        found = _candidates(fleet, model, skip, size, room, want + 1)
        for ns in found[:want]:
            room.take(ns.node.id, PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB)
            starts.append(_start(model.name, ns.node))
        left = missing - len(starts)
        if left > 0 and len(found) > len(starts):
            short, code = _limit(left, st.settings.prefetch_max)
        elif left > 0:
            short = f"{left} more: no other node with a model cache, room and a fitting profile"
            code = "prefetch_no_node"
    status = PrefetchStatus(
        wanted=wanted,
        cached=sorted(cached),
        running=sorted(running | {a.node for a in starts}),
        failed=failed,
        short=short,
        short_code=code,
    )
    return starts, status


def _limit(left: int, most: int) -> tuple[str, PrefetchCode]:
    return f"{left} more wait: {most} prefetches run at most", "prefetch_limit"


def _start(model: str, node: Node) -> PrefetchAction:
    why = f"weights kept ahead of demand on {node.name}"
    return PrefetchAction(op="start", model=model, node=node.id, code="prefetch_ahead", reason=why)


def _replica_nodes(st: PassState, model: str) -> set[str]:
    """Nodes where a replica of the model runs or starts: it fetches its own weights there."""
    nodes = {s.node for r in st.inv.facts.by_model.get(model, []) for s in r.shards}
    nodes |= {s.node for a in st.ledger.starts if a.model == model for s in a.shards}
    return nodes


def _candidates(
    fleet: _Fleet, model: Model, skip: set[str], size: int | None, room: _Room, want: int
) -> list[NodeState]:
    """Up to `want` nodes that may take a prefetch of the model, the most free cache bytes
    first (unknown last), then by name: open to a prefetch (_Fleet), with room in the cache
    for the weights (when both are known), a profile of the model that fits the node's
    description, none taken in this pass yet."""
    found: list[NodeState] = []
    for ns in fleet.open_nodes(model, size):
        node = ns.node
        if node.id in skip or node.id in room.busy:
            continue
        if any(_may_land(p, node) for p in model.profiles):
            found.append(ns)
            if len(found) >= want:
                break
    return found


def _gpus_fit(profile: Profile, node: Node) -> bool:
    """The profile's devices are on the node (what nodes of one kind share)."""
    if profile.mig_profile is not None:
        return any(
            s.profile == profile.mig_profile and s.healthy
            for g in node.gpus
            if g.mig is not None and g.healthy and model_matches(profile, g.model)
            for s in g.mig
        )
    usable = [
        g
        for g in node.gpus
        if g.mig is None
        and g.healthy
        and model_matches(profile, g.model)
        and memory_suffices(profile, g.memory_gb)
    ]
    return len(usable) >= profile.gpus


def _may_land(profile: Profile, node: Node) -> bool:
    """The profile fits the node's description (healthy GPUs or a slice of its MIG profile
    of an allowed model, CPU and memory), whatever is free: by the built-in rules, as the
    model's reach is counted (extra filters are not asked)."""
    if node.cpu_cores + 1e-9 < profile.cpu_cores or node.memory_gb + 1e-9 < profile.memory_gb:
        return False
    return _gpus_fit(profile, node)
