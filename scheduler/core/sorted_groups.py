"""Groups of possible victims, each read in order only as far as it is read, and merged
across groups lazily (preemption.VictimPool files its candidates in them)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator
from operator import attrgetter
from typing import Any, Generic, TypeVar

from scheduler.core.facts import LiveReplica

# The items of a group: tuples, compared as tuples are.
Order = TypeVar("Order", bound=tuple[Any, ...])

_BY_ID = attrgetter("id")
_BY_CREATED = attrgetter("created_at")


def oldest_first(live: list[LiveReplica]) -> list[LiveReplica]:
    """By creation, then id: two stable sorts on keys read in C, no key tuple per replica."""
    ordered = sorted(live, key=_BY_ID)
    ordered.sort(key=_BY_CREATED)
    return ordered


class Sorted(Generic[Order]):
    """Distinct items read in sorted order, sorted only as far as they are read: a heap of the
    rest under a sorted head. Making the heap is linear where a sort is not, and a group of
    possible victims is read a few items deep, if at all (the victim search takes the first
    POOL_CAP candidates of a tier)."""

    def __init__(self) -> None:
        self.head: list[Order] = []  # the smallest, in order
        self.rest: list[Order] = []  # each one greater than every one in head
        self.heaped = True  # whether `rest` is a heap yet

    def add(self, item: Order) -> None:
        """While the group is being made: in any order, heaped when first read."""
        self.rest.append(item)
        self.heaped = False

    def size(self) -> int:
        return len(self.head) + len(self.rest)

    def at(self, j: int) -> Order | None:
        """The j-th smallest, or None past the last."""
        head = self.head
        if j < len(head):
            return head[j]
        rest = self.rest
        if not self.heaped:
            heapq.heapify(rest)
            self.heaped = True
        while len(head) <= j:
            if not rest:
                return None
            head.append(heapq.heappop(rest))
        return head[j]

    def insert(self, item: Order) -> None:
        head = self.head
        if head and item < head[-1]:
            insort(head, item)
        elif self.heaped:
            heapq.heappush(self.rest, item)
        else:
            self.rest.append(item)

    def remove(self, item: Order) -> None:
        head = self.head
        i = bisect_left(head, item)
        if i < len(head) and head[i] == item:
            del head[i]
            return
        self.rest.remove(item)
        if self.heaped:
            heapq.heapify(self.rest)


def merged(groups: list[Sorted[Order]]) -> Iterator[Order]:
    """The groups merged, smallest first, each read as it is reached (as heapq.merge, which
    runs as Python: this one is compiled). No two items of the groups are equal."""
    heap = []
    for i, g in enumerate(groups):
        first = g.at(0)
        if first is not None:
            heap.append((first, i, 0))
    heapq.heapify(heap)
    while heap:
        order, i, j = heap[0]
        yield order
        j += 1
        item = groups[i].at(j)
        if item is not None:
            heapq.heapreplace(heap, (item, i, j))
        else:
            heapq.heappop(heap)
