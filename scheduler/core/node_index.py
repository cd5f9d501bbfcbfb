"""Which eligible nodes have free devices, indexed so placement visits only nodes that could
hold a shard (inventory.Inventory keeps one; a trial's clone forks it copy-on-write), and the
map of node states that a trial forks copy-on-write alike (`NodeMap`).

Three indexes of node ids, kept in step:
- `by_free`: by the count of free whole GPUs;
- `by_kind`: by (that count, the node's kind), a kind being a node shape (facts.Shape, what
  the built-in static filters read): a walk for a profile skips whole kinds its static
  filters refuse instead of visiting, pass after pass, every node of them (most of a
  heterogeneous fleet for a profile limited to one GPU model);
- `by_slice`: by the MIG profiles a node has a free slice of.

Buckets are dicts used as ordered sets (never plain sets, whose order changes from one
process to the next), so a walk is the same for the same snapshot. A `by_kind` bucket maps
each node to the sequence number of its filing: merging a count's kinds by it gives exactly
the `by_free` order, so skipping kinds never changes which node a walk meets first.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Bucket = dict[str, Any]  # node id -> None (by_free, by_slice) or its filing number (by_kind)


@dataclass
class NodeIndex:
    by_free: dict[int, Bucket] = field(default_factory=dict)
    by_kind: dict[tuple[int, int], Bucket] = field(default_factory=dict)
    by_slice: dict[str, Bucket] = field(default_factory=dict)
    # The by_kind keys, sorted: a new list whenever a key is added (forks share it).
    keys: list[tuple[int, int]] = field(default_factory=list)
    # One filing counter for an index and all its forks, so filings never share a number.
    seq: list[int] = field(default_factory=lambda: [0])
    # (gpus, roomiest first, kinds) -> the by_kind keys a walk reads, per count in walk
    # order, and the `keys` list they were worked out from (shared by forks).
    plans: dict[object, tuple[list[tuple[int, int]], list[tuple[int, list[tuple[int, int]]]]]] = (
        field(default_factory=dict)
    )
    # Buckets still shared with the index this one was forked from, as (id of the index
    # dict, key): copied on their first change (None: all are its own).
    shared: set[tuple[int, object]] | None = None

    def fork(self) -> NodeIndex:
        """A copy that shares every bucket until it changes one (a bucket may hold most of
        the fleet, and a trial changes a few)."""
        twin = NodeIndex(dict(self.by_free), dict(self.by_kind), dict(self.by_slice), self.keys)
        twin.seq = self.seq
        twin.plans = self.plans
        free, kind, sliced = id(twin.by_free), id(twin.by_kind), id(twin.by_slice)
        twin.shared = (
            {(free, k) for k in twin.by_free}
            | {(kind, k) for k in twin.by_kind}
            | {(sliced, k) for k in twin.by_slice}
        )
        return twin

    def _bucket(self, index: dict[Any, Bucket], key: object) -> Bucket | None:
        """A bucket this index may change (its own copy of a shared one), if any."""
        bucket = index.get(key)
        shared = self.shared
        if bucket is not None and shared is not None and (id(index), key) in shared:
            shared.discard((id(index), key))
            bucket = index[key] = dict(bucket)
        return bucket

    def _file(self, index: dict[Any, Bucket], key: object, node_id: str) -> None:
        bucket = self._bucket(index, key)
        if bucket is None:
            bucket = index[key] = {}
        bucket[node_id] = None

    def file(self, node_id: str, free_gpus: int, kind: int, slices: Iterable[str]) -> None:
        """File an eligible node under what it has free."""
        if free_gpus:
            self._file(self.by_free, free_gpus, node_id)
            key = (free_gpus, kind)
            bucket = self._bucket(self.by_kind, key)
            if bucket is None:
                bucket = self.by_kind[key] = {}
                self.keys = sorted([*self.keys, key])
            if node_id not in bucket:  # as by_free: a node filed again keeps its place
                bucket[node_id] = self.seq[0]
                self.seq[0] += 1
        for prof in slices:
            self._file(self.by_slice, prof, node_id)

    def unfile(self, node_id: str, free_gpus: int, kind: int, slices: Iterable[str]) -> None:
        """Take a node out from under what it had free when filed."""
        bucket = self._bucket(self.by_free, free_gpus)
        if bucket is not None:
            bucket.pop(node_id, None)
        bucket = self._bucket(self.by_kind, (free_gpus, kind))
        if bucket is not None:
            bucket.pop(node_id, None)
        for prof in slices:
            ids = self._bucket(self.by_slice, prof)
            if ids is not None:
                ids.pop(node_id, None)

    def with_slice(self, mig_profile: str) -> Iterable[str]:
        return self.by_slice.get(mig_profile, ())

    def with_free(
        self, gpus: int, roomiest_first: bool, kinds: frozenset[int] | None
    ) -> Iterator[str]:
        """Nodes with at least `gpus` free whole GPUs, by count (tightest or roomiest first),
        in filing order within a count. With `kinds`, a count whose nodes are mostly of other
        kinds yields only those of `kinds` (merged by filing number: the same order); one whose
        nodes mostly are of them yields all (the caller's static verdicts skip the few others,
        more cheaply than a merge)."""
        if kinds is None:
            for count in sorted(self.by_free, reverse=roomiest_first):
                if count >= gpus:
                    yield from self.by_free[count]
            return
        plan = self.plans.get((gpus, roomiest_first, kinds))
        if plan is None or plan[0] is not self.keys:
            per_count: dict[int, list[tuple[int, int]]] = {}
            for key in self.keys:
                if key[0] >= gpus and key[1] in kinds:
                    per_count.setdefault(key[0], []).append(key)
            order = sorted(per_count, reverse=roomiest_first)
            plan = self.plans[(gpus, roomiest_first, kinds)] = (
                self.keys,
                [(c, per_count[c]) for c in order],
            )
        by_kind = self.by_kind
        for count, keys in plan[1]:
            buckets = [b for b in (by_kind[k] for k in keys) if b]
            if not buckets:
                continue
            whole = self.by_free[count]
            if len(buckets) == 1:
                mine = buckets[0]
                yield from (whole if 2 * len(mine) >= len(whole) else mine)
            elif 2 * sum(len(b) for b in buckets) >= len(whole):
                yield from whole
            else:
                merged = heapq.merge(*(((n, nid) for nid, n in b.items()) for b in buckets))
                for _, nid in merged:
                    yield nid


V = TypeVar("V")


class NodeMap(Generic[V]):
    """Node id -> its state, for an inventory and its trials: a trial's own copies over the
    states it shares with the inventory it was cloned from, so a clone copies only what its
    parent had copied, never the whole fleet (a pass clones for every preemption trial)."""

    def __init__(self, base: dict[str, V], own: dict[str, V] | None = None) -> None:
        self._base = base  # never written: shared by every fork
        self._own: dict[str, V] = {} if own is None else own

    def fork(self) -> NodeMap[V]:
        return NodeMap(self._base, dict(self._own))

    def __getitem__(self, node_id: str) -> V:
        state = self._own.get(node_id)
        return self._base[node_id] if state is None else state

    def get(self, node_id: str) -> V | None:
        state = self._own.get(node_id)
        return self._base.get(node_id) if state is None else state

    def __setitem__(self, node_id: str, state: V) -> None:
        if node_id not in self._base:
            raise KeyError(node_id)  # a trial changes nodes, it never adds one
        self._own[node_id] = state

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._base

    def __len__(self) -> int:
        return len(self._base)

    def items(self) -> Iterator[tuple[str, V]]:
        """In the base's order (the inventory's, by node id), each node's own copy if any."""
        own = self._own
        for node_id, state in self._base.items():
            mine = own.get(node_id)
            yield node_id, (state if mine is None else mine)

    def values(self) -> Iterator[V]:
        for _, state in self.items():
            yield state
