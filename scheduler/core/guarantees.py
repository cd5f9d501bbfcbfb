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


def back_within(owner: str, need: Vec, inv: Inventory) -> bool:
    """Whether the owner would be within its guarantee without a replica that counts `need`:
    it would then take the room back from a borrower (a replica borrowed by its CPU alone,
    say; rule R6)."""
    g = guarantee_of(owner, inv.facts.quotas)
    if g is None:
        return False
    have = inv.usage.get(g[0], ZERO)
    return all(have[i] - need[i] <= g[1][i] + 1e-9 for i in range(3))


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


class GuaranteeUse:
    """What the replicas walked so far (oldest first) hold of one guarantee, shared by the
    models under its prefix: once past it, every newer replica there is borrowed."""

    def __init__(self, caps: Vec) -> None:
        self.gpus = 0.0
        self.cpu = 0.0
        self.memory = 0.0
        self.caps = (caps[0] + 1e-9, caps[1] + 1e-9, caps[2] + 1e-9)
        self.past = False  # a replica passed the guarantee: all that is newer is borrowed

    def borrowed(self, need: Vec) -> bool:
        """Count the next replica in; whether it is past the guarantee."""
        if self.past:
            return True
        self.gpus += need[0]
        self.cpu += need[1]
        self.memory += need[2]
        caps = self.caps
        self.past = self.gpus > caps[0] or self.cpu > caps[1] or self.memory > caps[2]
        return self.past
