"""Preemption (DESIGN.md section 6): which replicas may give way for a model, in which order,
and the smallest set of them that actually makes it fit, tried on a copy of the inventory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.core.inventory import ZERO, Inventory, Vec, owner_prefixes, profile_need
from scheduler.core.models import CLASS_RANK, Model, Quota, Replica, Snapshot
from scheduler.core.placement import Placement, place
from scheduler.core.plugins import Filter, Scorer

TIER_IDLE, TIER_BORROWED, TIER_LOWER_ABOVE_MIN, TIER_SAME_ABOVE_MIN, TIER_LOWER_MIN = range(5)


@dataclass(frozen=True)
class Victim:
    replica: Replica
    model: Model
    tier: int
    idle_s: float
    gpus: float
    memory_gb: float
    above_min: bool


def _guarantee_of(owner: str, quotas: dict[str, Quota]) -> tuple[str, Vec] | None:
    """The most specific quota on the owner's path that guarantees anything."""
    for prefix in reversed(owner_prefixes(owner)):
        q = quotas.get(prefix)
        if q is not None and any(
            v is not None for v in (q.guarantee.gpus, q.guarantee.cpu_cores, q.guarantee.memory_gb)
        ):
            g = q.guarantee
            return prefix, (g.gpus or 0.0, g.cpu_cores or 0.0, g.memory_gb or 0.0)
    return None


def _within(have: Vec, cap: Vec) -> bool:
    return all(h <= c + 1e-9 for h, c in zip(have, cap, strict=True))


def borrowed_replicas(snapshot: Snapshot, models: dict[str, Model]) -> set[str]:
    """Replicas held past their owner's guarantee: per guaranteed prefix, the newest beyond it.
    Fixed for a whole pass (stops take effect only once Nomad reports them), so computed once."""
    quotas = {q.owner: q for q in snapshot.quotas}
    by_prefix: dict[str, list[tuple[Replica, Vec]]] = {}
    borrowed: set[str] = set()
    for r in snapshot.replicas:
        m = models.get(r.model)
        if m is None or not r.counts:
            continue
        prof = m.profile(r.profile)
        need = profile_need(prof) if prof else ZERO
        g = _guarantee_of(m.owner, quotas)
        if g is None:
            borrowed.add(r.id)  # no guarantee anywhere up its path: all of it is borrowed
            continue
        by_prefix.setdefault(g[0], []).append((r, need))
    for prefix, reps in by_prefix.items():
        cap = _guarantee_of(prefix, quotas)
        assert cap is not None
        total: Vec = ZERO
        for r, need in sorted(reps, key=lambda x: (x[0].created_at, x[0].id)):
            total = (total[0] + need[0], total[1] + need[1], total[2] + need[2])
            if not _within(total, cap[1]):
                borrowed.add(r.id)
    return borrowed


def candidates(
    m: Model,
    snapshot: Snapshot,
    models: dict[str, Model],
    inv: Inventory,
    live: dict[str, int],
    excluded: set[str],
    borrowed: set[str],
) -> list[Victim]:
    now: datetime = snapshot.now
    settings = snapshot.settings
    quotas = {q.owner: q for q in snapshot.quotas}
    my_rank = CLASS_RANK[m.class_]
    below_min = live.get(m.name, 0) < m.scaling.min
    mine = _guarantee_of(m.owner, quotas)
    reclaim = False
    if mine is not None:
        have = inv.usage.get(mine[0], ZERO)
        need = profile_need(m.profiles[0])
        reclaim = _within((have[0] + need[0], have[1] + need[1], have[2] + need[2]), mine[1])

    by_model: dict[str, list[Replica]] = {}
    for r in snapshot.replicas:
        if r.model == m.name or not r.counts or r.preempted_for or r.id in excluded:
            continue
        by_model.setdefault(r.model, []).append(r)

    out: list[Victim] = []
    for name, reps in sorted(by_model.items()):
        other = models.get(name)
        if other is None:
            continue  # not in the catalog (or invalid): never touched
        rank = CLASS_RANK[other.class_]
        reps.sort(key=lambda r: (r.created_at, r.id), reverse=True)  # newest are above min
        above = max(len(reps) - other.scaling.min, 0)
        for i, r in enumerate(reps):
            above_min = i < above
            # Unknown use is not idleness (as in the Go original).
            idle = (now - r.last_used_at).total_seconds() if r.last_used_at else 0.0
            tier = -1
            if rank < my_rank and other.scaling.on_demand and idle >= settings.eviction_grace_s:
                tier = TIER_IDLE
            elif rank < my_rank and above_min:
                tier = TIER_LOWER_ABOVE_MIN
            elif rank == my_rank and above_min and below_min:
                tier = TIER_SAME_ABOVE_MIN
            elif rank < my_rank and other.class_ != "critical":
                tier = TIER_LOWER_MIN
            if quotas and other.owner != m.owner:
                if r.id in borrowed and reclaim and (other.class_ != "critical" or above_min):
                    if tier != TIER_IDLE:
                        tier = TIER_BORROWED  # taken back whatever the classes
                elif r.id not in borrowed and _guarantee_of(other.owner, quotas) is not None:
                    continue  # within its owner's guarantee: only its own owner may take it
            if tier < 0:
                continue
            if (
                r.ready_at is not None
                and (now - r.ready_at).total_seconds() < settings.min_lifetime_s
            ):
                continue  # just paid for its model load
            if len({s.node for s in r.shards}) > 1:
                continue  # a multi-node replica is never a victim
            prof = other.profile(r.profile)
            need = profile_need(prof) if prof else ZERO
            out.append(Victim(r, other, tier, idle, need[0], need[2], above_min))
    out.sort(key=lambda v: (v.tier, -v.idle_s, v.gpus, v.memory_gb, v.replica.id))
    return out


def _fits(
    m: Model, inv: Inventory, gone: list[Victim], filters: list[Filter], scorers: list[Scorer]
) -> Placement | None:
    trial = inv.clone()
    for v in gone:
        trial.release(v.replica.id)
    return place(m, trial, filters, scorers, explain=False).placement


def choose(
    m: Model,
    cands: list[Victim],
    inv: Inventory,
    max_victims: int,
    filters: list[Filter],
    scorers: list[Scorer],
) -> list[Victim]:
    """Candidates in order until the model fits, then every one not needed is spared."""
    chosen: list[Victim] = []
    for v in cands:
        if len(chosen) == max_victims:
            break
        chosen.append(v)
        if _fits(m, inv, chosen, filters, scorers) is None:
            continue
        for i in range(len(chosen) - 1, -1, -1):
            if len(chosen) == 1:
                break
            fewer = chosen[:i] + chosen[i + 1 :]
            if _fits(m, inv, fewer, filters, scorers) is not None:
                chosen = fewer
        return chosen
    return []
