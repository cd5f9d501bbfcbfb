"""Weighted fair sharing of what is borrowed past the guarantees.

Each owner is accounted at its *quota node*: the most specific prefix of its path that has a
quota (or the owner itself). Its share is its dominant borrowed fraction, as Kueue's fair
sharing and KAI's over-quota weights define it: for every resource, what it holds past its
guarantee over the fleet's capacity of that resource; the largest of these, divided by the
quota's weight. A dimension the guarantee leaves unset is not constrained, so nothing of it
counts as borrowed; an owner with no guarantee borrows all it holds.

What an owner's fair share is in GPUs (`ideal_gpus`, for the sentences of rule R7 and the
bench) is the weighted water-filling of the fleet's GPUs over what the owners' models want:
each owner its guarantee first (up to what it wants), then the rest by weight, none past
what it wants.
"""

from __future__ import annotations

from scheduler.core.guarantees import guarantee_vec, guarantees_anything
from scheduler.core.inventory import ZERO, Inventory, Vec, owner_prefixes, profile_need
from scheduler.core.models import Model, Quota, Snapshot
from scheduler.core.usage import recent_share

EPS = 1e-9


def _guaranteed(q: Quota | None) -> Vec:
    if q is None or not guarantees_anything(q):
        return ZERO
    return guarantee_vec(q)


class FairShare:
    def __init__(self, snapshot: Snapshot, inv: Inventory) -> None:
        self.capacity: Vec = inv.facts.capacity  # of the eligible nodes (facts.collect)
        self.quotas = inv.facts.quotas
        self._limits = inv.facts.limits
        self._node: dict[str, tuple[str, Vec, float, float]] = {}
        # Per quota node, its recent usage as a fraction of the fleet (rule F4; off: empty).
        self._recent = recent_share(snapshot, self.capacity[0])
        self._models = snapshot.models
        self._targets: dict[str, int] = {}  # what each model grows to (Counts.target)
        self._ideal: dict[str, float] | None = None  # worked out when first asked

    def wants(self, targets: dict[str, int]) -> None:
        """What each model grows to in this pass (read only if a fair share is asked)."""
        self._targets = targets

    def node_of(self, owner: str) -> str:
        """The prefix an owner is accounted at."""
        return self._account(owner)[0]

    def _account(self, owner: str) -> tuple[str, Vec, float, float]:
        """Where an owner is accounted, its guarantee there, its weight and what its recent
        usage adds to its share (rule F4; 0 when off) (kept per pass)."""
        found = self._node.get(owner)
        if found is None:
            node = owner
            for p in reversed(owner_prefixes(owner)):
                if p in self.quotas:
                    node = p
                    break
            q = self.quotas.get(node)
            weight = q.weight if q is not None else 1.0
            found = self._node[owner] = (
                node,
                _guaranteed(q),
                weight,
                self._recent.get(node, 0.0) / weight,
            )
        return found

    def share(self, owner: str, inv: Inventory, delta: Vec = (0.0, 0.0, 0.0)) -> float:
        """The owner's weighted dominant share of the borrowable pool, with `delta` added to
        what it holds (a replica to come, or one to go); plus its recent usage's part with
        usage_half_life_s set (rule F4)."""
        node, g, weight, recent = self._account(owner)
        have = inv.usage.get(node, (0.0, 0.0, 0.0))
        cap = self.capacity
        top = 0.0
        for i in range(3):
            past = have[i] + delta[i] - g[i]
            if past > EPS:
                top = max(top, past / cap[i])
        return top / weight + recent

    def ideal_gpus(self, node: str) -> float:
        """The weighted fair share, in GPUs, of the owner accounted at `node` (worked out once
        a pass, when a sentence first asks)."""
        if self._ideal is None:
            self._ideal = water_fill(self.capacity[0], self._claims(self._models))
        return self._ideal.get(node, 0.0)

    def _claims(self, models: list[Model]) -> dict[str, tuple[float, float, float]]:
        """Per quota node: its GPU guarantee, its weight and the GPUs its models want."""
        wanted: dict[str, float] = {}
        for m in models:
            node = self.node_of(m.owner)
            gpus = profile_need(m.profiles[0])[0] * self._targets.get(m.name, 0)
            wanted[node] = wanted.get(node, 0.0) + gpus
        out = {}
        for node, gpus in wanted.items():
            _, g, weight, _ = self._account(node)
            limit = self._limits.get(node)
            if limit is not None and limit.gpus is not None:
                gpus = min(gpus, limit.gpus)  # never past its limit, whatever it wants
            out[node] = (g[0], weight, gpus)
        return out


def water_fill(capacity: float, claims: dict[str, tuple[float, float, float]]) -> dict[str, float]:
    """Each claimant's weighted fair share of `capacity`; a claim is (guarantee, weight,
    wanted). Guarantees first (up to what is wanted), then the rest by weight: every claimant
    still wanting more gets `weight * level`, the level as high as the rest allows."""
    base = {k: min(g, want) for k, (g, _, want) in claims.items()}
    promised = sum(base.values())
    if promised > capacity:  # guarantees past the fleet: each its part of what there is
        base = {k: v * capacity / promised for k, v in base.items()}
    left = max(capacity - sum(base.values()), 0.0)
    # Claimants in the order they are satisfied as the level rises.
    rising = sorted(
        (k for k, (_, w, want) in claims.items() if want - base[k] > EPS and w > 0),
        key=lambda k: ((claims[k][2] - base[k]) / claims[k][1], k),
    )
    weights = sum(claims[k][1] for k in rising)
    out = dict(base)
    for k in rising:
        _, w, want = claims[k]
        more = min(want - base[k], left * w / weights)
        out[k] = base[k] + more
        left -= more
        weights -= w
    return out
