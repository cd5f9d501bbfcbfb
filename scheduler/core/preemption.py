"""Preemption (docs/decision-core.md, rules R1-R6): which replicas may give way for a model,
and in which order. The smallest set of them that makes it fit is victims.choose's; whether
an owner is within its guarantee is guarantees.py's. This module re-exports both, as the
pass sees preemption as one thing.

The pool of possible victims is built once per pass. Replicas are grouped by everything
their tier depends on besides the asking model (class, idle on-demand, above its model's
minimum, owner, borrowed, guarded by a guarantee), each group read in within-tier order
(victims.Sorted: sorted only as far as it is read), so asking for a model's candidates merges
a few groups lazily instead of rating every replica of the fleet again. Only the first
`max_victims` candidates are ever tried.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import NamedTuple

from scheduler.core.facts import LiveReplica
from scheduler.core.fair_reclaim import Reclaim, apart, may_reclaim, toward_share
from scheduler.core.fairshare import FairShare
from scheduler.core.guarantees import (
    GuaranteeUse,
    back_within,
    guarantee_of,
    owed_replicas,
    within_guarantee,
)
from scheduler.core.inventory import Inventory, Vec, profile_need
from scheduler.core.models import CLASS_RANK, Model, Replica, Snapshot
from scheduler.core.sorted_groups import Sorted, merged, oldest_first
from scheduler.core.victims import (
    POOL_CAP,
    TIER_BORROWED,
    TIER_FAIR,
    TIER_IDLE,
    TIER_LOWER_ABOVE_MIN,
    TIER_LOWER_MIN,
    TIER_SAME_ABOVE_MIN,
    TIERS,
    Victim,
    choose,
    set_cost,
    stop_code,
    stop_reason,
)

# Re-exported: the pass and the tests ask this module for the whole of preemption.
__all__ = [
    "POOL_CAP",
    "GroupKey",
    "Victim",
    "VictimOrder",
    "VictimPool",
    "choose",
    "owed_replicas",
    "set_cost",
    "stop_code",
    "stop_reason",
    "within_guarantee",
]

CRITICAL = CLASS_RANK["critical"]


class GroupKey(NamedTuple):
    """Everything a possible victim's tier depends on besides the asking model."""

    rank: int  # its class
    idle_on_demand: bool  # on demand and idle at least eviction_grace_s
    above_min: bool  # among its model's replicas above the minimum
    owner: str
    borrowed: bool  # held past its owner's guarantee
    guarded: bool  # its owner has a guarantee somewhere up its path


# Made per model and kind of victim, every pass: the C tuple constructor, not the NamedTuple's.
_group = partial(tuple.__new__, GroupKey)

# Order within a tier (rule R2): longest idle first, then the smaller, then by id:
# (-idle_s, gpus, memory_gb, replica id); then its place oldest first (unique, so the entry
# after it is never compared, even for two replicas of one id), and the entry itself: what a
# merged walk over the groups reads. A plain tuple, made per possible victim every pass.
VictimOrder = tuple[float, float, float, str, int, "_Entry"]


class _Entry:
    """What stays true of one possible victim for the whole pass. (A plain class, made per
    possible victim: compiled, its fields are read natively; see _ModelFacts.)"""

    def __init__(
        self,
        replica: Replica,
        model: Model,
        rank: int,
        idle_s: float,
        idle_on_demand: bool,
        borrowed: bool,
        guarded: bool,
        need: Vec,
        rid: str,
        age: int,
    ) -> None:
        self.replica = replica
        self.model = model
        self.rank = rank
        self.idle_s = idle_s
        self.idle_on_demand = idle_on_demand
        self.gpus = need[0]
        self.memory_gb = need[2]
        self.borrowed = borrowed
        self.guarded = guarded  # its owner has a guarantee somewhere up its path
        self.need = need  # what it counts against quotas, all shards together
        self.rid = rid
        self.age = age  # its place among the live replicas, oldest first
        self.where: GroupKey | None = None  # the group its order is filed in, if any

    def order(self) -> VictimOrder:
        """As the pool files it. (Made when filed, not kept: the entry in its own order would
        be a reference cycle, left to the collector. `need`'s floats, not new ones.)"""
        return (-self.idle_s, self.need[0], self.need[2], self.rid, self.age, self)

    def group(self, above_min: bool) -> GroupKey:
        """Everything its tier depends on besides the asking model."""
        return _group(
            (
                self.rank,
                self.idle_on_demand,
                above_min,
                self.model.owner,
                self.borrowed,
                self.guarded,
            )
        )


class _ModelFacts:
    """What the pool's walk keeps per model. (A plain class: compiled, a dataclass is built
    through its generated __init__, which runs as Python.)"""

    def __init__(self, m: Model, within: GuaranteeUse | None) -> None:
        sc = m.scaling
        self.rank = CLASS_RANK[m.class_]
        self.on_demand = sc.on_demand
        self.guarded = within is not None  # its owner has a guarantee somewhere up its path
        self.minimum = sc.min
        # Use of its guarantee so far; None without quotas or without a guarantee up its path.
        self.within = within
        self.ids: list[str] = []  # its live replicas, oldest first
        self.count = 0  # of those, the ones this pass does not already stop
        # Its groups, by (idle on demand, above its minimum, borrowed) as 4 * a + 2 * b + c:
        # each key with the pool's list for it, appended to without hashing the key per replica.
        self.filed: list[tuple[GroupKey, Sorted[VictimOrder]] | None] = [None] * 8
        self.entries: list[_Entry] = []  # its possible victims, oldest first


def _nodes_of(r: Replica) -> tuple[str, ...]:
    if len(r.shards) == 1:
        return (r.shards[0].node,)
    return tuple(dict.fromkeys(sh.node for sh in r.shards))


class VictimPool:
    """Every live replica that could ever give way, grouped for quick, ordered asking."""

    def __init__(self, snapshot: Snapshot, inv: Inventory, stopped: set[str]) -> None:
        now = snapshot.now
        settings = snapshot.settings
        self.quotas = inv.facts.quotas
        self.stopped = stopped  # the pass's ledger's: replicas it already stops
        self._groups: dict[GroupKey, Sorted[VictimOrder]] = {}
        # Per model its live replicas oldest first (the newest are the ones above its
        # minimum) and its possible victims, stopped or not.
        self._models: dict[str, _ModelFacts] = {}
        self._replicas = inv.facts.replicas
        # Set by the pass when quotas are in play: preemption between borrowers of one class
        # must move toward the fair share, never away from it.
        self.fair: FairShare | None = None
        self._reclaim: Reclaim | None = None  # rule R7's shares, made when first asked
        self._guarantees: dict[str, GuaranteeUse] = {}  # by the guarantee's prefix
        self._owners: dict[str, GuaranteeUse | None] = {}  # by owner
        self._pairs: dict[GroupKey, tuple[GroupKey, Sorted[VictimOrder]]] = {}
        self._grace = settings.eviction_grace_s
        self._fresh_after = now - timedelta(seconds=settings.min_lifetime_s)
        self._now = now
        # One walk, oldest first: what each owner holds within its guarantee accumulates in
        # that order (the newest beyond it are the borrowed), and a model's replicas above
        # its minimum are its newest ones.
        for age, lr in enumerate(oldest_first(inv.facts.live)):
            self._file(lr, age)
        self._groups.update((key, pair[1]) for key, pair in self._pairs.items())

    def _file(self, lr: LiveReplica, age: int) -> None:
        """Count one live replica in, and file it as a possible victim if it may be one."""
        m, need, rid, ready = lr.model, lr.need, lr.id, lr.ready_at
        known = self._models.get(m.name)
        if known is None:
            known = self._models[m.name] = _ModelFacts(m, self._use_of(m.owner))
        within = known.within
        # No quotas, or no guarantee up its path: all of it is borrowed.
        is_borrowed = within is None or within.borrowed(need)
        if lr.preempted_for:
            return
        known.ids.append(rid)
        left = 0
        stopped = rid in self.stopped
        if not stopped:
            known.count += 1
            left = known.count - known.minimum
        if known.rank == CRITICAL and left <= 0:
            return  # never a victim this pass (a critical minimum stays one)
        if ready is not None and ready > self._fresh_after:
            return  # just paid for its model load
        # Unknown use is not idleness (as in the Go original).
        used = lr.last_used_at
        idle = (self._now - used).total_seconds() if used is not None else 0.0
        idle_od = known.on_demand and idle >= self._grace
        entry = _Entry(
            lr.replica, m, known.rank, idle, idle_od, is_borrowed, known.guarded, need, rid, age
        )
        known.entries.append(entry)
        if stopped:
            return
        variant = 4 * idle_od + 2 * (left > 0) + is_borrowed
        filed = known.filed[variant]
        if filed is None:
            key = entry.group(left > 0)  # kept once per group, not once per model:
            pairs = self._pairs
            filed = pairs.get(key) or pairs.setdefault(key, (key, Sorted()))
            known.filed[variant] = filed
        filed[1].add(entry.order())
        entry.where = filed[0]

    def _use_of(self, owner: str) -> GuaranteeUse | None:
        """The running use of the guarantee up the owner's path, shared by every owner under
        that guarantee's prefix (None: no quotas, or no guarantee)."""
        if not self.quotas:
            return None
        if owner not in self._owners:
            g = guarantee_of(owner, self.quotas)
            if g is None:
                self._owners[owner] = None
            else:
                use = self._guarantees.get(g[0])
                if use is None:
                    use = self._guarantees[g[0]] = GuaranteeUse(g[1])
                self._owners[owner] = use
        return self._owners[owner]

    def _regroup(self, model: str) -> None:
        """(Re)file a model's replicas: which are above its minimum depends on how many of
        them this pass has not already stopped."""
        known = self._models[model]
        ids = [rid for rid in reversed(known.ids) if rid not in self.stopped]
        above = max(len(ids) - known.minimum, 0)
        entries = {e.rid: e for e in known.entries}
        for i, rid in enumerate(ids):
            e = entries.get(rid)
            if e is None:
                continue  # never a victim (counted all the same)
            key = e.group(i < above)
            old = e.where
            if old == key:
                continue
            order = e.order()
            if old is not None:
                self._groups[old].remove(order)
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = Sorted()
            group.insert(order)
            e.where = key

    def regroup(self, replica_id: str) -> None:
        """The pass stopped this replica (it is in `stopped`): its model's others move."""
        rep = self._replicas.get(replica_id)
        if rep is not None and rep.model in self._models:
            self._regroup(rep.model)

    def _tier(self, key: GroupKey, m: Model, my_rank: int, below_min: bool, reclaim: bool) -> int:
        rank, idle_od, above_min, owner, borrowed, guarded = key  # GroupKey, field by field
        tier = -1
        if rank < my_rank and idle_od:
            tier = TIER_IDLE
        elif rank < my_rank and above_min:
            tier = TIER_LOWER_ABOVE_MIN
        elif rank == my_rank and above_min and below_min:
            tier = TIER_SAME_ABOVE_MIN
        elif rank < my_rank:  # a lower class is never critical
            tier = TIER_LOWER_MIN
        if self.quotas and owner != m.owner:
            if borrowed and reclaim and (rank != CRITICAL or above_min):
                if tier != TIER_IDLE:
                    tier = TIER_BORROWED  # taken back whatever the classes
            elif not borrowed and guarded:
                return -1  # within its owner's guarantee: only its own owner may take it
            elif (
                tier < 0
                and self.fair is not None
                and may_reclaim(rank, my_rank, above_min, borrowed, below_min, reclaim)
                and apart(self.fair, m.owner, owner)
            ):
                tier = TIER_FAIR  # toward fair share, if the shares allow (rule R7)
        return tier

    def reclaim(self, inv: Inventory) -> Reclaim:
        """Rule R7's shares (asked only for its tier, which needs quotas, so `fair` is set)."""
        if self._reclaim is None:
            assert self.fair is not None
            self._reclaim = Reclaim(self.fair, inv.facts, self.stopped)
        return self._reclaim

    def fair_set(self, m: Model, chosen: list[Victim], inv: Inventory) -> bool:
        """Whether a victim set keeps rule R7 as a whole (two victims of one owner for one
        replica lower that owner's share by both)."""
        if self.fair is None or all(v.tier != TIER_FAIR for v in chosen):
            return True
        return self.reclaim(inv).allows_set(m, chosen, inv)

    def candidates(self, m: Model, inv: Inventory, live: int) -> Iterator[Victim]:
        """The replicas that may give way for `m`, in the order they should."""
        my_rank = CLASS_RANK[m.class_]
        below_min = live < m.scaling.min
        reclaim = within_guarantee(m, inv)
        # Its new replica would be borrowed and could be taken back (rule R2's borrowed tier):
        # then it must not take what its owner would reclaim at once (rule R6).
        borrower = bool(self.quotas) and not reclaim and (my_rank != CRITICAL or not below_min)
        tiers: list[list[Sorted[VictimOrder]]] = [[] for _ in range(TIERS)]
        for key, group in self._groups.items():
            if group.size():
                tier = self._tier(key, m, my_rank, below_min, reclaim)
                if tier >= 0:
                    tiers[tier].append(group)
        # The asker's owner's share with the new replica: the same for every candidate, as the
        # pass does not change the inventory while it reads them (choose and HeldBack take
        # them all first).
        fair = self.fair
        mine = fair.share(m.owner, inv, profile_need(m.profiles[0])) if fair is not None else 0.0
        for tier, groups in enumerate(tiers):
            for order in merged(groups):
                e = order[5]
                if e.rid in self.stopped:
                    continue
                if e.replica.model == m.name:
                    continue
                nodes = _nodes_of(e.replica)
                if len(nodes) > 1 and e.rank >= my_rank:
                    continue  # a multi-node replica gives way to a higher class only
                if tier == TIER_FAIR and not self.reclaim(inv).allows(
                    m, e.model.owner, e.need, inv
                ):
                    continue
                if (
                    tier == TIER_SAME_ABOVE_MIN
                    and e.model.owner != m.owner
                    and e.borrowed
                    and fair is not None  # between owners: toward the fair share only
                    and not toward_share(fair, mine, e.model.owner, e.need, inv)
                ):
                    continue
                if (
                    borrower
                    and e.guarded
                    and e.model.owner != m.owner
                    and back_within(e.model.owner, e.need, inv)
                ):
                    continue
                yield self._victim(e, tier, nodes, m, inv)

    def _victim(
        self, e: _Entry, tier: int, nodes: tuple[str, ...], m: Model, inv: Inventory
    ) -> Victim:
        """A candidate as `m` is offered it, with what its stop's sentence names."""
        where = e.where
        assert where is not None  # it was reached in a group
        lent = toward = None
        if tier in (TIER_BORROWED, TIER_FAIR):
            g = guarantee_of(e.model.owner, self.quotas)
            lent = g[0] if g is not None else None
        if tier == TIER_FAIR:
            toward = self.reclaim(inv).how_far(m.owner, inv)
        shards = max(len(e.replica.shards), 1)
        return Victim(
            e.replica,
            e.model,
            tier,
            e.idle_s,
            e.gpus,
            e.memory_gb,
            where.above_min,
            nodes,
            lent,
            e.need[1] / shards,
            e.need[2] / shards,
            toward,
        )
