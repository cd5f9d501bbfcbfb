"""Where a model's weights already are, from the model caches the snapshot reports: the nodes
whose cache holds the model's revision (warm), the weights' size, and whether a node's cache
has room for them (rules W1-W5 in docs/decision-core.md). Built once per pass; a snapshot
without caches costs one look at each node and nothing more.

Nothing here deletes weights, or asks for it: the core only reads what the caches hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduler.core.fleet import CachedSnapshot, Node
from scheduler.core.models import Model, Settings

GB = 10**9
# A server's own start (process, CUDA context, graph capture) before and after the weights.
SERVER_OVERHEAD_S = 20.0
# What a warm node saves, as a share of a cold start, when the weights' size is unknown.
UNKNOWN_SAVING = 0.3
DEFAULTS = Settings()  # download_gbps, load_gbps when a Warmth is made without them


def weight_bytes(source: str, nodes: Iterable[Node], weights_gb: float | None = None) -> int | None:
    """A model's weight size: a cached safetensors index's total_size, else a cached
    snapshot's bytes, else the model's own `serve.weights_gb`. None (unknown, never 0)
    when none of them says."""
    held = [s for n in nodes if n.cache for s in n.cache.snapshots if s.source == source]
    return size_of(held, weights_gb)


def size_of(held: Sequence[CachedSnapshot], weights_gb: float | None) -> int | None:
    """weight_bytes, from the cached snapshots of the model's repository."""
    indexed = [s.weights_bytes for s in held if s.weights_bytes]
    if indexed:
        return max(indexed)
    sized = [s.bytes for s in held if s.bytes > 0]
    if sized:
        return max(sized)
    return round(weights_gb * GB) if weights_gb else None


def warm_saving(weight_bytes: int | None, download_gbps: float, load_gbps: float) -> float:
    """The share of a cold start's expected time that a warm start saves: the download's
    share of the server's start, the download and the load (Gbit/s; rule W1). UNKNOWN_SAVING
    when the size is unknown."""
    if weight_bytes is None or weight_bytes <= 0:
        return UNKNOWN_SAVING
    bits = weight_bytes * 8
    download = bits / (download_gbps * 1e9)
    load = bits / (load_gbps * 1e9)
    return download / (SERVER_OVERHEAD_S + download + load)


class Warmth:
    """The caches of one pass's fleet, and what was worked out from them, by model name."""

    def __init__(
        self,
        nodes: Sequence[Node] = (),
        download_gbps: float = DEFAULTS.download_gbps,
        load_gbps: float = DEFAULTS.load_gbps,
    ) -> None:
        self.cached: list[Node] = [n for n in nodes if n.cache is not None]
        self.download_gbps = download_gbps
        self.load_gbps = load_gbps
        # Every cached snapshot by repository, with its node, in node order: one walk over
        # the caches per pass, made at the first question (a model asks only of its own).
        self._snaps: dict[str, list[CachedSnapshot]] | None = None
        self._ids: dict[str, list[str]] = {}  # each of those snapshots' node
        self._warm: dict[str, tuple[str, ...]] = {}  # model -> warm node ids, in node order
        self._warm_set: dict[str, frozenset[str]] = {}
        self._sizes: dict[str, int | None] = {}
        self._savings: dict[str, float] = {}

    def warm_nodes(self, model: Model) -> tuple[str, ...]:
        """The nodes whose cache holds the model's revision, in the snapshot's node order."""
        if not self.cached or model.serve is None:
            return ()
        found = self._warm.get(model.name)
        if found is None:
            wanted = model.serve.revision or "main"
            ids: list[str] = []
            source = model.serve.source
            for nid, snap in zip(self._node_ids(source), self._held(source), strict=True):
                # CachedSnapshot.matches, inline: from the compiled core a record's method is
                # a call into the interpreter, and this runs for every cached snapshot.
                if (wanted == snap.commit or wanted in snap.revisions) and (
                    not ids or ids[-1] != nid
                ):
                    ids.append(nid)
            found = self._warm[model.name] = tuple(ids)
            self._warm_set[model.name] = frozenset(found)
        return found

    def warm_set(self, model: Model) -> frozenset[str]:
        """warm_nodes, as a set."""
        if not self.cached or model.serve is None:
            return frozenset()
        self.warm_nodes(model)
        return self._warm_set[model.name]

    def is_warm(self, model: Model, node_id: str) -> bool:
        return node_id in self.warm_set(model)

    def warm_elsewhere(self, model: Model, here: Sequence[str]) -> bool:
        """Whether a node other than `here` holds the model's revision: a replica stopped
        there could start again warm elsewhere."""
        return any(nid not in here for nid in self.warm_nodes(model))

    def weight_bytes(self, model: Model) -> int | None:
        """The model's weight size (module weight_bytes), None when unknown."""
        if model.serve is None:
            return None
        if model.name not in self._sizes:
            held = self._held(model.serve.source)
            self._sizes[model.name] = size_of(held, model.serve.weights_gb)
        return self._sizes[model.name]

    def saving(self, model: Model) -> float:
        """What a warm node saves the model, as a share of a cold start (warm_saving)."""
        found = self._savings.get(model.name)
        if found is None:
            size = self.weight_bytes(model)
            found = self._savings[model.name] = warm_saving(
                size, self.download_gbps, self.load_gbps
            )
        return found

    def lacks_room(self, model: Model, node: Node) -> bool:
        """Whether the node's cache reports too little free room for the model's weights,
        which it does not hold yet: both sizes known (unknown never says no)."""
        cache = node.cache
        if cache is None or cache.free_bytes is None:
            return False
        need = self.weight_bytes(model)
        if need is None or need <= cache.free_bytes:
            return False
        return not self.is_warm(model, node.id)

    def _held(self, source: str) -> list[CachedSnapshot]:
        if self._snaps is None:
            self._index()
        assert self._snaps is not None
        return self._snaps.get(source, [])

    def _node_ids(self, source: str) -> list[str]:
        if self._snaps is None:
            self._index()
        return self._ids.get(source, [])

    def _index(self) -> None:
        """Every cached snapshot by repository, and its node, in node order."""
        snaps: dict[str, list[CachedSnapshot]] = {}
        ids: dict[str, list[str]] = {}
        for node in self.cached:
            cache = node.cache
            assert cache is not None
            nid = node.id
            for snap in cache.snapshots:
                source = snap.source
                found = snaps.get(source)
                if found is None:
                    snaps[source] = [snap]
                    ids[source] = [nid]
                else:
                    found.append(snap)
                    ids[source].append(nid)
        self._snaps, self._ids = snaps, ids
