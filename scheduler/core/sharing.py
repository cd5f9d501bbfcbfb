"""The order of growth (docs/decision-core.md, rules F1, F2). Without quotas every short model
takes its turn in its order. With quotas every owner below its guarantee is served up to it
first, then the rest one replica at a time to the owner with the least weighted dominant
share (fairshare.FairShare)."""

from __future__ import annotations

import heapq
from typing import NamedTuple

from scheduler.core.fairshare import FairShare
from scheduler.core.growth import grow
from scheduler.core.inventory import Vec, profile_need
from scheduler.core.models import CLASS_RANK, Model
from scheduler.core.pass_state import PassState
from scheduler.core.preemption import owed_replicas
from scheduler.core.turn_order import ModelOrder, ShareKey


class _Member(NamedTuple):
    """A model waiting in its group: its ShareKey but the share, which the group has."""

    neg_class_rank: int
    at_min: bool
    order: ModelOrder  # unique (it ends with the name): the model is never compared
    model: Model


_Group = tuple[str, Vec]  # owner, what one more replica counts for


def take_turns(st: PassState, order: list[Model]) -> None:
    """Every model short of its target, in turn order, places what it misses (or preempts)."""
    if st.inv.facts.quotas:
        fair = st.turns.fair = FairShare(st.snapshot, st.inv)
        fair.wants(st.counts.target)
        guarantees_first(st, order)
        share_the_rest(st, order, fair)
    else:
        for m in order:
            turn(st, m, None)


def turn(st: PassState, m: Model, cap: int | None) -> None:
    """Let the model place up to `cap` more replicas (all it misses: None). Once it could not
    place one (pending, waiting, held) it has had its say for the pass."""
    if m.name in st.turns.outcome or missing(st, m) <= 0:
        return
    pending, tried = grow(st, m, cap)
    if pending is not None:
        st.turns.outcome[m.name] = (pending, tried)


def missing(st: PassState, m: Model) -> int:
    name = m.name
    counts = st.counts
    return counts.target[name] - counts.live[name] - counts.placed.get(name, 0)


def guarantees_first(st: PassState, order: list[Model]) -> None:
    """Every owner below its guarantee is served up to it before anyone borrows: each model
    places (or reclaims) only the replicas that keep its owner within."""
    st.turns.owing = True
    for m in order:
        most = missing(st, m)
        if most > 0 and m.name not in st.turns.outcome:
            cap = owed_replicas(m, st.inv, most)
            if cap > 0:
                turn(st, m, cap)
    st.turns.owing = False


def _need(st: PassState, m: Model) -> Vec:
    """What one more replica of the model counts for (its first profile's)."""
    need = st.turns.needs.get(m.name)
    if need is None:
        need = st.turns.needs[m.name] = profile_need(m.profiles[0])
    return need


def _member(st: PassState, m: Model) -> _Member:
    have = st.counts.live[m.name] + st.counts.placed.get(m.name, 0)
    return _Member(-CLASS_RANK[m.class_], have >= m.scaling.min, st.turns.keys[m.name], m)


def _group_key(
    st: PassState, fair: FairShare, group: _Group, members: list[_Member]
) -> ShareKey | None:
    """The least ShareKey of a group's models still missing replicas (None: none is)."""
    while members:
        m = members[0].model
        if m.name not in st.turns.outcome and missing(st, m) > 0:
            top = members[0]
            share = fair.share(group[0], st.inv, group[1])
            return ShareKey(top.neg_class_rank, top.at_min, share, top.order)
        heapq.heappop(members)
    return None


def share_the_rest(st: PassState, order: list[Model], fair: FairShare) -> None:
    """What is past the guarantees, one replica at a time to the model with the least
    ShareKey. Models of one owner whose replicas count alike always have the same share, so
    they wait in one group, ordered by the rest of the key: a replica placed makes only its
    owner's few groups stale, not every model of that owner. Shares only grow in this phase,
    so a stale group key is re-checked on pop."""
    groups: dict[_Group, list[_Member]] = {}
    for m in order:
        if missing(st, m) > 0:
            groups.setdefault((m.owner, _need(st, m)), []).append(_member(st, m))
    heap: list[tuple[ShareKey, _Group]] = []
    for group, members in groups.items():
        heapq.heapify(members)
        key = _group_key(st, fair, group, members)
        if key is not None:
            heap.append((key, group))
    heapq.heapify(heap)
    while heap:
        key, group = heapq.heappop(heap)
        members = groups[group]
        fresh = _group_key(st, fair, group, members)
        if fresh is None:
            continue
        if fresh != key and heap and fresh > heap[0][0]:
            heapq.heappush(heap, (fresh, group))
            continue
        m = heapq.heappop(members).model
        turn(st, m, 1)
        if m.name not in st.turns.outcome and missing(st, m) > 0:
            heapq.heappush(members, _member(st, m))
        after = _group_key(st, fair, group, members)
        if after is not None:
            heapq.heappush(heap, (after, group))
