"""The order of growth with quotas in play (docs/decision-core.md, rules F1, F2): every owner
below its guarantee is served up to it first, then the rest one replica at a time to the
owner with the least weighted dominant share (fairshare.FairShare).

`SharingPhases` is mixed into decide._Pass, whose grow step and state (declared here) it uses.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from mypy_extensions import trait

from scheduler.core.fairshare import FairShare
from scheduler.core.inventory import Inventory, Vec, profile_need
from scheduler.core.models import CLASS_RANK, Model, ProfileTrial
from scheduler.core.preemption import owed_replicas


class ModelOrder(NamedTuple):
    """Where a model places in a pass (rules F1, F2 aside): higher classes first, then models
    below their minimum; within that the models that can use the fewest devices (most
    constrained first), then the larger replica first (first-fit decreasing: small ones fill
    the gaps big ones leave, not the reverse), then by name."""

    neg_class_rank: int
    at_min: bool
    reach: int
    neg_gpus: float
    name: str


class ShareKey(NamedTuple):
    """Past the guarantees: class and minimum as always, then the owner with the least
    weighted dominant share once the replica is placed, then the model's own order."""

    neg_class_rank: int
    at_min: bool
    share: float
    order: ModelOrder


class _Member(NamedTuple):
    """A model waiting in its group: its ShareKey but the share, which the group has."""

    neg_class_rank: int
    at_min: bool
    order: ModelOrder  # unique (it ends with the name): the model is never compared
    model: Model


_Group = tuple[str, Vec]  # owner, what one more replica counts for


@trait  # mixed into the pass beside Retirement: mypyc compiles only traits as second bases
class SharingPhases:
    inv: Inventory
    fair: FairShare
    owing: bool
    live: dict[str, int]
    target: dict[str, int]
    placed: dict[str, int]
    needs: dict[str, tuple[float, float, float]]
    keys: dict[str, ModelOrder]
    outcome: dict[str, tuple[str | None, list[ProfileTrial]]]

    def grow(self, m: Model, cap: int | None = None) -> tuple[str | None, list[ProfileTrial]]:
        raise NotImplementedError

    def turn(self, m: Model, cap: int | None) -> None:
        """Let the model place up to `cap` more replicas (all it misses: None). Once it could
        not place one (pending, waiting, held) it has had its say for the pass."""
        if m.name in self.outcome or self.missing(m) <= 0:
            return
        pending, tried = self.grow(m, cap)
        if pending is not None:
            self.outcome[m.name] = (pending, tried)

    def missing(self, m: Model) -> int:
        name = m.name
        return self.target[name] - self.live[name] - self.placed.get(name, 0)

    def guarantees_first(self, order: list[Model]) -> None:
        """Every owner below its guarantee is served up to it before anyone borrows: each
        model places (or reclaims) only the replicas that keep its owner within."""
        self.owing = True
        for m in order:
            most = self.missing(m)
            if most > 0 and m.name not in self.outcome:
                cap = owed_replicas(m, self.inv, most)
                if cap > 0:
                    self.turn(m, cap)
        self.owing = False

    def need(self, m: Model) -> Vec:
        """What one more replica of the model counts for (its first profile's)."""
        need = self.needs.get(m.name)
        if need is None:
            need = self.needs[m.name] = profile_need(m.profiles[0])
        return need

    def _member(self, m: Model) -> _Member:
        have = self.live[m.name] + self.placed.get(m.name, 0)
        return _Member(-CLASS_RANK[m.class_], have >= m.scaling.min, self.keys[m.name], m)

    def _group_key(self, group: _Group, members: list[_Member]) -> ShareKey | None:
        """The least ShareKey of a group's models still missing replicas (None: none is)."""
        while members:
            m = members[0].model
            if m.name not in self.outcome and self.missing(m) > 0:
                top = members[0]
                share = self.fair.share(group[0], self.inv, group[1])
                return ShareKey(top.neg_class_rank, top.at_min, share, top.order)
            heapq.heappop(members)
        return None

    def share_the_rest(self, order: list[Model]) -> None:
        """What is past the guarantees, one replica at a time to the model with the least
        ShareKey. Models of one owner whose replicas count alike always have the same share,
        so they wait in one group, ordered by the rest of the key: a replica placed makes only
        its owner's few groups stale, not every model of that owner. Shares only grow in this
        phase, so a stale group key is re-checked on pop."""
        groups: dict[_Group, list[_Member]] = {}
        for m in order:
            if self.missing(m) > 0:
                groups.setdefault((m.owner, self.need(m)), []).append(self._member(m))
        heap: list[tuple[ShareKey, _Group]] = []
        for group, members in groups.items():
            heapq.heapify(members)
            key = self._group_key(group, members)
            if key is not None:
                heap.append((key, group))
        heapq.heapify(heap)
        while heap:
            key, group = heapq.heappop(heap)
            members = groups[group]
            fresh = self._group_key(group, members)
            if fresh is None:
                continue
            if fresh != key and heap and fresh > heap[0][0]:
                heapq.heappush(heap, (fresh, group))
                continue
            m = heapq.heappop(members).model
            self.turn(m, 1)
            if m.name not in self.outcome and self.missing(m) > 0:
                heapq.heappush(members, self._member(m))
            after = self._group_key(group, members)
            if after is not None:
                heapq.heappush(heap, (after, group))
