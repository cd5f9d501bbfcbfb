"""Guarantees (docs/decision-core.md, rules F1, R2, R3): the most specific guarantee on an
owner's path, whether one more replica keeps the owner within it, and how many do.

An unset dimension of a guarantee is not constrained: a guarantee of {gpus: 4} protects by
GPUs alone.
"""

from __future__ import annotations

import math

from scheduler.core.inventory import ZERO, Inventory, Vec, owner_prefixes, profile_need
from scheduler.core.models import Model, Quota

INF = math.inf


def _dim(v: float | None) -> float:
    # An unset dimension is not constrained: a guarantee of {gpus: 4} protects by GPUs alone.
    return INF if v is None else v


def guarantees_anything(q: Quota) -> bool:
    """A quota that guarantees nothing protects nothing (and is not a guarantee of all)."""
    g = q.guarantee
    return g.gpus is not None or g.cpu_cores is not None or g.memory_gb is not None


def guarantee_vec(q: Quota) -> Vec:
    g = q.guarantee
    return (_dim(g.gpus), _dim(g.cpu_cores), _dim(g.memory_gb))


def guarantee_of(owner: str, quotas: dict[str, Quota]) -> tuple[str, Vec] | None:
    """The most specific quota on the owner's path that guarantees anything."""
    for prefix in reversed(owner_prefixes(owner)):
        q = quotas.get(prefix)
        if q is not None and guarantees_anything(q):
            return prefix, guarantee_vec(q)
    return None


def within_guarantee(m: Model, inv: Inventory) -> bool:
    """Whether one more replica of `m` keeps its owner within its guarantee: then it may take
    back what other owners borrowed past theirs."""
    mine = guarantee_of(m.owner, inv.facts.quotas)
    if mine is None:
        return False
    have = inv.usage.get(mine[0], ZERO)
    need = profile_need(m.profiles[0])
    return _within((have[0] + need[0], have[1] + need[1], have[2] + need[2]), mine[1])


def owed_replicas(m: Model, inv: Inventory, most: int) -> int:
    """How many more replicas of `m` (its first profile, up to `most`) keep its owner within
    its guarantee."""
    mine = guarantee_of(m.owner, inv.facts.quotas)
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
