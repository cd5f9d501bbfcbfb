"""Weighted fair sharing of what is borrowed past the guarantees.

Each owner is accounted at its *quota node*: the most specific prefix of its path that has a
quota (or the owner itself). Its share is its dominant borrowed fraction, as Kueue's fair
sharing and KAI's over-quota weights define it: for every resource, what it holds past its
guarantee over the fleet's capacity of that resource; the largest of these, divided by the
quota's weight. A dimension the guarantee leaves unset is not constrained, so nothing of it
counts as borrowed; an owner with no guarantee borrows all it holds.
"""

from __future__ import annotations

from scheduler.core.guarantees import guarantee_vec, guarantees_anything
from scheduler.core.inventory import ZERO, Inventory, Vec, owner_prefixes
from scheduler.core.models import Quota, Snapshot

EPS = 1e-9


def _guaranteed(q: Quota | None) -> Vec:
    if q is None or not guarantees_anything(q):
        return ZERO
    return guarantee_vec(q)


class FairShare:
    def __init__(self, snapshot: Snapshot, inv: Inventory) -> None:
        self.capacity: Vec = inv.facts.capacity  # of the eligible nodes (facts.collect)
        self.quotas = inv.facts.quotas
        self._node: dict[str, tuple[str, Vec, float]] = {}

    def node_of(self, owner: str) -> str:
        """The prefix an owner is accounted at."""
        return self._account(owner)[0]

    def _account(self, owner: str) -> tuple[str, Vec, float]:
        """Where an owner is accounted, its guarantee there and its weight (kept per pass)."""
        found = self._node.get(owner)
        if found is None:
            node = owner
            for p in reversed(owner_prefixes(owner)):
                if p in self.quotas:
                    node = p
                    break
            q = self.quotas.get(node)
            found = self._node[owner] = (node, _guaranteed(q), q.weight if q is not None else 1.0)
        return found

    def share(self, owner: str, inv: Inventory, delta: Vec = (0.0, 0.0, 0.0)) -> float:
        """The owner's weighted dominant share of the borrowable pool, with `delta` added to
        what it holds (a replica to come, or one to go)."""
        node, g, weight = self._account(owner)
        have = inv.usage.get(node, (0.0, 0.0, 0.0))
        cap = self.capacity
        top = 0.0
        for i in range(3):
            past = have[i] + delta[i] - g[i]
            if past > EPS:
                top = max(top, past / cap[i])
        return top / weight
