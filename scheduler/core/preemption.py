"""Preemption (docs/decision-core.md, rules R1-R6): which replicas may give way for a model,
in which order, and the smallest set of them that actually makes it fit, tried on a copy of
the inventory.

The pool of possible victims is built once per pass. Replicas are grouped by everything
their tier depends on besides the asking model (class, idle on-demand, above its model's
minimum, owner, borrowed, guarded by a guarantee), each group kept in within-tier order, so
asking for a model's candidates merges a few sorted groups lazily instead of rating every
replica of the fleet again. Only the first `max_victims` candidates are ever tried.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from itertools import combinations, islice
from typing import NamedTuple

from scheduler.core.fairshare import FairShare
from scheduler.core.inventory import (
    ZERO,
    Inventory,
    LiveReplica,
    Vec,
    owner_prefixes,
    profile_need,
)
from scheduler.core.models import CLASS_RANK, Model, Profile, Quota, Replica, Snapshot
from scheduler.core.placement import Placer

TIER_IDLE, TIER_BORROWED, TIER_LOWER_ABOVE_MIN, TIER_SAME_ABOVE_MIN, TIER_LOWER_MIN = range(5)
CRITICAL = CLASS_RANK["critical"]
INF = math.inf


class VictimOrder(NamedTuple):
    """Order within a tier (rule R2): longest idle first, then the smaller, then by id."""

    neg_idle_s: float
    gpus: float
    memory_gb: float
    replica: str


class GroupKey(NamedTuple):
    """Everything a possible victim's tier depends on besides the asking model."""

    rank: int  # its class
    idle_on_demand: bool  # on demand and idle at least eviction_grace_s
    above_min: bool  # among its model's replicas above the minimum
    owner: str
    borrowed: bool  # held past its owner's guarantee
    guarded: bool  # its owner has a guarantee somewhere up its path


# Made per possible victim, every pass: the C tuple constructor, not the NamedTuple's own.
_order = partial(tuple.__new__, VictimOrder)
_group = partial(tuple.__new__, GroupKey)
# A possible victim as the pool files it: replica, model, class rank, idle seconds, idle on
# demand, need, borrowed, guarded.
_Facts = tuple[Replica, Model, int, float, bool, "Vec", bool, bool]


@dataclass(slots=True)
class Victim:
    replica: Replica
    model: Model
    tier: int
    idle_s: float
    gpus: float
    memory_gb: float
    above_min: bool
    # Every node it has a shard on; a multi-node replica gives way as a whole (one victim).
    nodes: tuple[str, ...] = ()
    borrowed_from: str | None = None  # the guaranteed prefix it is borrowed past, if any
    shard_cpu: float = 0.0  # CPU cores and memory each of its shards holds
    shard_mem: float = 0.0

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1


@dataclass(slots=True)
class _Entry:
    """What stays true of one live replica for the whole pass."""

    replica: Replica
    model: Model
    rank: int
    idle_s: float
    idle_on_demand: bool
    gpus: float
    memory_gb: float
    borrowed: bool
    guarded: bool  # its owner has a guarantee somewhere up its path
    order: VictimOrder
    need: Vec  # what it counts against quotas, all shards together

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


def _dim(v: float | None) -> float:
    # An unset dimension is not constrained: a guarantee of {gpus: 4} protects by GPUs alone.
    return INF if v is None else v


def guarantee_vec(q: Quota) -> Vec:
    g = q.guarantee
    return (_dim(g.gpus), _dim(g.cpu_cores), _dim(g.memory_gb))


def _guarantee_of(owner: str, quotas: dict[str, Quota]) -> tuple[str, Vec] | None:
    """The most specific quota on the owner's path that guarantees anything."""
    for prefix in reversed(owner_prefixes(owner)):
        q = quotas.get(prefix)
        if q is not None and any(
            v is not None for v in (q.guarantee.gpus, q.guarantee.cpu_cores, q.guarantee.memory_gb)
        ):
            return prefix, guarantee_vec(q)
    return None


def within_guarantee(m: Model, inv: Inventory) -> bool:
    """Whether one more replica of `m` keeps its owner within its guarantee: then it may take
    back what other owners borrowed past theirs."""
    mine = _guarantee_of(m.owner, inv.facts.quotas)
    if mine is None:
        return False
    have = inv.usage.get(mine[0], ZERO)
    need = profile_need(m.profiles[0])
    return _within((have[0] + need[0], have[1] + need[1], have[2] + need[2]), mine[1])


def owed_replicas(m: Model, inv: Inventory, most: int) -> int:
    """How many more replicas of `m` (its first profile, up to `most`) keep its owner within
    its guarantee."""
    mine = _guarantee_of(m.owner, inv.facts.quotas)
    if mine is None:
        return 0
    have = inv.usage.get(mine[0], ZERO)
    need = profile_need(m.profiles[0])
    n = 0
    while n < most:
        k = n + 1
        if not _within(
            (have[0] + k * need[0], have[1] + k * need[1], have[2] + k * need[2]), mine[1]
        ):
            break
        n = k
    return n


def _within(have: Vec, cap: Vec) -> bool:
    return all(h <= c + 1e-9 for h, c in zip(have, cap, strict=True))


def _nodes_of(r: Replica) -> tuple[str, ...]:
    if len(r.shards) == 1:
        return (r.shards[0].node,)
    return tuple(dict.fromkeys(sh.node for sh in r.shards))


def _age(live: LiveReplica) -> tuple[datetime, str]:
    return live[0].created_at, live[0].id


def _borrowed(oldest_first: list[LiveReplica], quotas: dict[str, Quota]) -> set[str]:
    """Replicas held past their owner's guarantee: per guaranteed prefix, the newest beyond it.
    Fixed for a whole pass (stops take effect only once Nomad reports them)."""
    guarantees: dict[str, tuple[str, Vec] | None] = {}
    by_prefix: dict[str, list[tuple[str, Vec]]] = {}
    borrowed: set[str] = set()
    for r, m, need, _ in oldest_first:
        if m.owner not in guarantees:
            guarantees[m.owner] = _guarantee_of(m.owner, quotas)
        g = guarantees[m.owner]
        if g is None:
            borrowed.add(r.id)  # no guarantee anywhere up its path: all of it is borrowed
            continue
        by_prefix.setdefault(g[0], []).append((r.id, need))
    for prefix, reps in by_prefix.items():
        cap = _guarantee_of(prefix, quotas)
        assert cap is not None
        cap_gpus, cap_cpu, cap_mem = (c + 1e-9 for c in cap[1])
        gpus = cpu = mem = 0.0
        for rid, need in reps:
            gpus += need[0]
            cpu += need[1]
            mem += need[2]
            if gpus > cap_gpus or cpu > cap_cpu or mem > cap_mem:
                borrowed.add(rid)
    return borrowed


class VictimPool:
    """Every live replica that could ever give way, grouped for quick, ordered asking."""

    def __init__(self, snapshot: Snapshot, inv: Inventory, excluded: set[str]) -> None:
        now = snapshot.now
        settings = snapshot.settings
        self.quotas = inv.facts.quotas
        self.excluded = excluded  # shared with the pass: replicas it already stops
        self._groups: dict[GroupKey, list[VictimOrder]] = {}
        # What each possible victim is, kept cheap: its _Entry is made only when asked for.
        self._facts: dict[str, _Facts] = {}
        self._entries: dict[str, _Entry] = {}
        self._where: dict[str, GroupKey] = {}
        # Per model its live replicas newest first: the newest are the ones above its minimum.
        self._by_model: dict[str, list[str]] = {}
        self._min: dict[str, int] = {}
        self._replicas = inv.facts.replicas
        # Set by the pass when quotas are in play: preemption between borrowers of one class
        # must move toward the fair share, never away from it.
        self.fair: FairShare | None = None
        oldest_first = sorted(inv.facts.live, key=_age)
        borrowed = _borrowed(oldest_first, self.quotas) if self.quotas else None
        grace = settings.eviction_grace_s
        fresh_after = now - timedelta(seconds=settings.min_lifetime_s)
        # How many of each model's replicas are above its minimum: the newest ones.
        above: dict[str, int] = {}
        by_model = self._by_model
        for t in reversed(oldest_first):
            r = t[0]
            if r.preempted_for:
                continue
            m = t[1]
            name = m.name
            ids = by_model.get(name)
            if ids is None:
                ids = by_model[name] = []
                self._min[name] = m.scaling.min
                above[name] = -m.scaling.min
            ids.append(r.id)
            if r.id not in excluded:
                above[name] += 1
        groups = self._groups
        facts = self._facts
        where = self._where
        per_model: dict[str, tuple[int, bool, bool, bool]] = {}  # rank, on demand, guarded
        for t in reversed(oldest_first):
            r = t[0]
            if r.preempted_for:
                continue
            m = t[1]
            name = m.name
            rid = r.id
            left = 0
            if rid not in excluded:
                left = above[name]
                above[name] = left - 1
            known = per_model.get(name)
            if known is None:
                known = per_model[name] = (
                    CLASS_RANK[m.class_],
                    m.scaling.on_demand,
                    _guarantee_of(m.owner, self.quotas) is not None if self.quotas else False,
                    False,
                )
            rank = known[0]
            if rank == CRITICAL and left <= 0:
                continue  # never a victim this pass (a critical minimum stays one)
            if r.ready_at is not None and r.ready_at > fresh_after:
                continue  # just paid for its model load
            # Unknown use is not idleness (as in the Go original).
            used = r.last_used_at
            idle = (now - used).total_seconds() if used is not None else 0.0
            need = t[2]
            is_borrowed = borrowed is None or rid in borrowed  # no quotas: all of it
            idle_od = known[1] and idle >= grace
            facts[rid] = (r, m, rank, idle, idle_od, need, is_borrowed, known[2])
            if rid in excluded:
                continue
            order = _order((-idle, need[0], need[2], rid))
            key = _group((rank, idle_od, left > 0, m.owner, is_borrowed, known[2]))
            group = groups.get(key)
            if group is None:
                group = groups[key] = []
            group.append(order)
            where[rid] = key
        for group in groups.values():
            group.sort()

    def _entry(self, rid: str) -> _Entry:
        e = self._entries.get(rid)
        if e is None:
            r, m, rank, idle, idle_od, need, is_borrowed, guarded = self._facts[rid]
            e = self._entries[rid] = _Entry(
                r,
                m,
                rank,
                idle,
                idle_od,
                need[0],
                need[2],
                is_borrowed,
                guarded,
                _order((-idle, need[0], need[2], rid)),
                need,
            )
        return e

    def _regroup(self, model: str) -> None:
        """(Re)file a model's replicas: which are above its minimum depends on how many of
        them this pass has not already stopped."""
        ids = [rid for rid in self._by_model[model] if rid not in self.excluded]
        above = max(len(ids) - self._min[model], 0)
        for i, rid in enumerate(ids):
            if rid not in self._facts:
                continue  # never a victim (counted all the same)
            e = self._entry(rid)
            key = e.group(i < above)
            old = self._where.get(rid)
            if old == key:
                continue
            if old is not None:
                self._groups[old].remove(e.order)
            insort(self._groups.setdefault(key, []), e.order)
            self._where[rid] = key

    def exclude(self, replica_id: str) -> None:
        """The pass stops this replica: never a victim again, and its model's others move."""
        self.excluded.add(replica_id)
        rep = self._replicas.get(replica_id)
        if rep is not None and rep.model in self._by_model:
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
        return tier

    def _toward_share(self, m: Model, e: _Entry, inv: Inventory) -> bool:
        """Whether taking `e` for `m` moves the two owners toward their fair shares: the
        asker's share with the new replica stays at or below the victim owner's share without
        the victim (Kueue's LessThanOrEqualToFinalShare)."""
        if self.fair is None:
            return True
        mine = self.fair.share(m.owner, inv, profile_need(m.profiles[0]))
        gone = (-e.need[0], -e.need[1], -e.need[2])
        return mine <= self.fair.share(e.model.owner, inv, gone) + 1e-9

    def candidates(self, m: Model, inv: Inventory, live: int) -> Iterator[Victim]:
        """The replicas that may give way for `m`, in the order they should."""
        my_rank = CLASS_RANK[m.class_]
        below_min = live < m.scaling.min
        reclaim = within_guarantee(m, inv)
        tiers: list[list[list[VictimOrder]]] = [[] for _ in range(5)]
        for key, group in self._groups.items():
            if group:
                tier = self._tier(key, m, my_rank, below_min, reclaim)
                if tier >= 0:
                    tiers[tier].append(group)
        for tier, groups in enumerate(tiers):
            for *_, rid in heapq.merge(*groups):  # VictimOrder: the replica id last
                if rid in self.excluded:
                    continue
                e = self._entry(rid)
                if e.replica.model == m.name:
                    continue
                nodes = _nodes_of(e.replica)
                if len(nodes) > 1 and e.rank >= my_rank:
                    continue  # a multi-node replica gives way to a higher class only
                if (
                    tier == TIER_SAME_ABOVE_MIN
                    and e.model.owner != m.owner
                    and e.borrowed
                    and not self._toward_share(m, e, inv)
                ):
                    continue
                above_min = self._where[rid].above_min
                lent = None
                if tier == TIER_BORROWED:
                    g = _guarantee_of(e.model.owner, self.quotas)
                    lent = g[0] if g is not None else None
                yield Victim(
                    e.replica,
                    e.model,
                    tier,
                    e.idle_s,
                    e.gpus,
                    e.memory_gb,
                    above_min,
                    nodes,
                    lent,
                    e.need[1] / max(len(e.replica.shards), 1),
                    e.need[2] / max(len(e.replica.shards), 1),
                )


TIER_NAMES = {
    TIER_IDLE: "idle on demand, of a lower class",
    TIER_LOWER_ABOVE_MIN: "lower class, above its minimum",
    TIER_SAME_ABOVE_MIN: "same class, above its minimum, for a model below its own",
    TIER_LOWER_MIN: "lower class, at its minimum",
}


def stop_reason(v: Victim, preemptor: Model) -> str:
    """The rule and the tier a victim gave way under, in a sentence an operator can check."""
    if v.tier == TIER_BORROWED:
        why = (
            f"borrowed past {v.borrowed_from}'s guarantee"
            if v.borrowed_from is not None
            else f"borrowed ({v.model.owner} has no guarantee)"
        )
        why += f", reclaimed within {preemptor.owner}'s guarantee"
    else:
        why = f"{TIER_NAMES[v.tier]} ({v.model.class_} for {preemptor.class_})"
    if v.multi_node:
        why += f"; all {len(v.nodes)} shards as one"
    return f"preempted for {preemptor.name}: {why}"


CostKey = tuple[bool, int, tuple[int, ...], float, float, tuple[str, ...]]


def set_cost(victims: Sequence[Victim]) -> CostKey:
    """What a victim set costs, compared in order: a multi-node replica only when nothing
    cheaper makes room; fewer victims; the lowest tiers (the worst one first); fewer GPUs
    lost; longest idle; then by id (so equal sets always resolve the same way)."""
    return (
        any(v.multi_node for v in victims),
        len(victims),
        tuple(sorted((v.tier for v in victims), reverse=True)),
        round(sum(v.gpus for v in victims), 6),
        -sum(min(v.idle_s, 1e9) for v in victims),
        tuple(sorted(v.replica.id for v in victims)),
    )


# Past this many candidates on one node, combinations give way to the Kubernetes reprieve.
_EXACT_UP_TO = 10


def _released(inv: Inventory, victims: Sequence[Victim]) -> tuple[Inventory, set[str]]:
    trial = inv.clone()
    touched: set[str] = set()
    for v in victims:
        touched.update(trial.release(v.replica.id))
    return trial, touched


def _on_node(
    ok: Callable[[Sequence[Victim]], bool],
    cands: list[Victim],
    limit: int,
    bound: CostKey | None,
    over: list[int] | None = None,
) -> list[Victim] | None:
    """The cheapest set of this node's candidates that makes room on it, within `limit` and
    cheaper than `bound`. As the Kubernetes scheduler selects victims on one node: if even
    all of them do not make room, none will; else the smallest set that does."""
    if not ok(cands):
        return None
    if len(cands) > limit and over is not None:
        over.append(len(cands))  # room can be made here, if perhaps only past the limit
    if len(cands) > _EXACT_UP_TO:
        # Reprieve: with all gone, add back the dearest first while the room stays.
        kept = list(cands)
        for v in sorted(cands, key=lambda v: set_cost([v]), reverse=True):
            fewer = [w for w in kept if w is not v]
            if ok(fewer):
                kept = fewer
        if len(kept) > limit or (bound is not None and set_cost(kept) >= bound):
            return None
        return kept
    found: list[Victim] | None = None
    for k in range(1, min(limit, len(cands)) + 1):
        if bound is not None and k > bound[1] and not bound[0]:
            break  # a set without a multi-node replica and fewer victims is found already
        for combo in sorted(combinations(cands, k), key=set_cost):
            cost = set_cost(combo)
            if bound is not None and cost >= bound:
                break
            if ok(combo):
                found, bound = list(combo), cost
                break
    return found


# How many candidates (in tier order) a victim search looks at: the search is exact on
# them; on a large fleet the first ones are the cheapest tiers anyway. Bounds a pass's time.
POOL_CAP = 24


def _room_possible(
    m: Model, profile: Profile, inv: Inventory, nid: str, held: list[float], placer: Placer
) -> bool:
    """A quick necessary condition before any trial: the node passes the static filters, and
    its free room plus all its candidates' (`held`: GPUs, CPU, memory) would hold a shard."""
    ns = inv.nodes.get(nid)
    if ns is None:
        return False
    if ns.free_cpu + held[1] + 1e-9 < profile.cpu_cores:
        return False
    if ns.free_mem + held[2] + 1e-9 < profile.memory_gb:
        return False
    if not profile.is_mig and len(ns.free_gpus) + held[0] < profile.gpus:
        return False
    return placer.could_hold(m, profile, ns)


def choose(
    m: Model,
    cands: Iterator[Victim],
    inv: Inventory,
    max_victims: int,
    placer: Placer,
    over: list[int] | None = None,
) -> list[Victim]:
    """The cheapest set of at most `max_victims` candidates whose going makes the model fit
    (set_cost): per node first, as the Kubernetes scheduler does, then as many nodes as a
    multi-node profile still lacks. [] when no set within `max_victims` makes room; then
    `over` gets the sizes of larger sets that would (on one node each)."""
    pool = list(islice(cands, POOL_CAP))
    if not pool or max_victims <= 0:
        return []

    def fits(gone: Sequence[Victim]) -> bool:
        trial, touched = _released(inv, gone)
        return placer.fits(m, trial, inv.version, touched)

    by_node: dict[str, list[Victim]] = {}
    held: dict[str, list[float]] = {}  # per node: what all its candidates hold there
    for v in pool:
        cpu, mem = v.shard_cpu, v.shard_mem
        for sh in v.replica.shards:
            by_node.setdefault(sh.node, []).append(v)
            h = held.get(sh.node)
            if h is None:
                h = held[sh.node] = [0.0, 0.0, 0.0]
            h[0] += len(sh.gpus)
            h[1] += cpu
            h[2] += mem
    best: list[Victim] | None = None
    walk = False  # whether the plain walk below may find what the per-node search cannot
    for profile in m.profiles:
        if inv.quota_block(m.owner, profile_need(profile)) is not None:
            walk = True  # room alone will not do: see the walk below
            continue
        walk = walk or profile.shards > 1
        ready = set(placer.feasible_nodes(m, profile, inv))
        lacking = profile.shards - len(ready)
        if lacking <= 0:
            continue
        per_node: list[tuple[CostKey, list[Victim]]] = []
        bound = set_cost(best) if best is not None and lacking == 1 else None
        for nid in sorted(by_node):
            if nid in ready or not _room_possible(m, profile, inv, nid, held[nid], placer):
                continue

            def ok(gone: Sequence[Victim], nid: str = nid, profile: Profile = profile) -> bool:
                trial, _ = _released(inv, gone)
                return placer.shard_fits(m, profile, trial, nid)

            found = _on_node(ok, by_node[nid], max_victims, bound, over)
            if found is not None:
                per_node.append((set_cost(found), found))
                if lacking == 1:
                    bound = per_node[-1][0]
        per_node.sort(key=lambda t: t[0])
        chosen: dict[str, Victim] = {}
        got = 0
        for _, found in per_node:
            if got == lacking:
                break
            new = {v.replica.id: v for v in found if v.replica.id not in chosen}
            if len(chosen) + len(new) <= max_victims:
                chosen.update(new)
                got += 1
        if got == lacking and fits(list(chosen.values())):
            picked = _prune(list(chosen.values()), fits)
            if best is None or set_cost(picked) < set_cost(best):
                best = picked
    if best is None:
        # One multi-node victim frees room on several nodes at once, where per-node sets
        # would each have cost a victim of their own.
        for v in pool:
            if v.multi_node and fits([v]) and (best is None or set_cost([v]) < set_cost(best)):
                best = [v]
    if best is None and walk:
        best = _walk(pool, max_victims, fits)
    return best or []


def _prune(chosen: list[Victim], fits: Callable[[Sequence[Victim]], bool]) -> list[Victim]:
    """Spare every victim not needed (the dearest first)."""
    for v in sorted(chosen, key=lambda v: set_cost([v]), reverse=True):
        if len(chosen) == 1:
            break
        fewer = [w for w in chosen if w is not v]
        if fits(fewer):
            chosen = fewer
    return chosen


def _walk(
    pool: list[Victim], max_victims: int, fits: Callable[[Sequence[Victim]], bool]
) -> list[Victim]:
    """Candidates in order until the model fits, then every one not needed is spared: for
    room that a quota limit rather than a node lacks (victims of the same owner anywhere)."""
    chosen: list[Victim] = []
    for v in pool:
        if len(chosen) == max_victims:
            break
        chosen.append(v)
        if fits(chosen):
            return _prune(chosen, fits)
    return []
