"""Reclaim toward weighted fair share (docs/decision-core.md, rules F3, R7).

Weighted fair share (F2) divides only the room that is free. An owner that comes late, after
others borrowed everything, would get its guarantee back (R2) and nothing more. So an owner
short of replicas past its guarantee may take borrowed replicas (past their owner's
guarantee, above their model's minimum, of its own class, never critical) from an owner
whose share is larger, as Kueue's fair-sharing preemption and KAI's reclaim by
allocated/fair-share ratio do, under Kueue's `LessThanOrEqualToFinalShare` rule: the taker's
share with its new replica stays at or below the victim owner's share without the victim.
Each such move lowers the larger of the two shares and leaves the others alone, so the
owners' shares, largest first, only ever decrease: no pair can take turns.

The class stays the first word: a lower class never takes a higher one's room this way (a
higher class would take it back by rule R1), and a higher class already takes a lower one's
by R1.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from scheduler.core.facts import PassFacts, add, owner_prefixes, profile_need, shard_held
from scheduler.core.fairshare import FairShare
from scheduler.core.inventory import ZERO, Inventory, Vec
from scheduler.core.models import CLASS_RANK, Model, Replica
from scheduler.core.victims import TIER_FAIR, Victim

CRITICAL = CLASS_RANK["critical"]


def may_reclaim(
    rank: int, my_rank: int, above_min: bool, borrowed: bool, below_min: bool, reclaim: bool
) -> bool:
    """Whether a replica of another owner, in a group of this kind, may give way toward fair
    share for a model of class `my_rank` (rule R7): borrowed past its owner's guarantee, above
    its model's minimum, of the same class and not critical, for a model that is not already
    below its minimum (rule R2's same-class tier) nor within its own guarantee (R2's
    borrowed tier)."""
    return (
        borrowed
        and above_min
        and rank == my_rank
        and rank != CRITICAL
        and not below_min
        and not reclaim
    )


def apart(fair: FairShare, taker: str, victim_owner: str) -> bool:
    """Whether two owners are accounted apart: neither's quota node is on the other's path
    (a node's usage counts everything under it, so a share taken from a node above the
    taker would count the taker's own replicas)."""
    a, b = fair.node_of(taker), fair.node_of(victim_owner)
    return a != b and not a.startswith(b + "/") and not b.startswith(a + "/")


class Reclaim:
    """Rule R7's shares in one pass. They count what each owner keeps: a replica stopping, or
    stopped earlier in the pass (for another taker, say), no longer counts for its owner, else
    two takers in one pass would both take from an owner for the same surplus."""

    def __init__(self, fair: FairShare, facts: PassFacts, stopped: set[str]) -> None:
        self.fair = fair
        self._facts = facts
        self._stopped = stopped  # the pass's ledger's: replicas it stops
        self._stopping: list[Replica] | None = None  # stopping since an earlier pass

    def _leaving(self, node: str, inv: Inventory) -> Vec:
        """What the owners under `node` hold that is on its way out and still counted in
        `inv` (a trial gives back its victims' room itself)."""
        facts = self._facts
        if self._stopping is None:
            self._stopping = [r for r in facts.replicas.values() if not r.counts]
        out = ZERO
        for r in chain(self._stopping, (facts.replicas[rid] for rid in self._stopped)):
            m = facts.models.get(r.model)
            if m is None or r.id in inv.released or node not in owner_prefixes(m.owner):
                continue
            out = add(out, _held(r, m, facts))
        return out

    def _kept(self, node: str, inv: Inventory) -> Vec:
        """What the owners under `node` hold and keep."""
        have, out = inv.usage.get(node, ZERO), self._leaving(node, inv)
        return (have[0] - out[0], have[1] - out[1], have[2] - out[2])

    def share(self, owner: str, inv: Inventory, delta: Vec) -> float:
        """The owner's weighted dominant share of what it keeps, with `delta` added."""
        out = self._leaving(self.fair.node_of(owner), inv)
        return self.fair.share(
            owner, inv, (delta[0] - out[0], delta[1] - out[1], delta[2] - out[2])
        )

    def allows(self, m: Model, victim_owner: str, need: Vec, inv: Inventory) -> bool:
        """Whether one victim of `victim_owner` may give way for one new replica of `m`."""
        return self._fair_move(m, {victim_owner: need}, inv)

    def allows_set(self, m: Model, victims: Sequence[Victim], inv: Inventory) -> bool:
        """The same for a whole victim set: each owner's victims in it count together."""
        taken: dict[str, Vec] = {}
        for v in victims:
            if v.tier == TIER_FAIR:
                owner = v.model.owner
                taken[owner] = add(taken.get(owner, ZERO), _held(v.replica, v.model, self._facts))
        return not taken or self._fair_move(m, taken, inv)

    def _fair_move(self, m: Model, taken: dict[str, Vec], inv: Inventory) -> bool:
        """Whether the taker is below its fair share in GPUs, every owner it takes from is
        above its own, and the taker's share with its new replica stays at or below
        each such owner's share without its victims (Kueue's LessThanOrEqualToFinalShare):
        the larger share goes down and the taker does not pass the owner it takes from."""
        fair = self.fair
        new = profile_need(m.profiles[0])
        node = fair.node_of(m.owner)
        if self._kept(node, inv)[0] >= fair.ideal_gpus(node) - 1e-9:
            return False
        mine = self.share(m.owner, inv, new)
        for owner, t in taken.items():
            theirs = fair.node_of(owner)
            if self._kept(theirs, inv)[0] <= fair.ideal_gpus(theirs) + 1e-9:
                return False
            if mine > self.share(owner, inv, (-t[0], -t[1], -t[2])) + 1e-9:
                return False
        return True

    def how_far(self, owner: str, inv: Inventory) -> str:
        """Where the taking owner stands, for the stop's sentence: "org/b: 1.0 of 3.0 GPUs"
        (the GPUs it keeps, of its weighted fair share of the GPUs its models want)."""
        node = self.fair.node_of(owner)
        held = self._kept(node, inv)[0]
        return f"{node}: {held:.1f} of {self.fair.ideal_gpus(node):.1f} GPUs"


def _held(r: Replica, m: Model, facts: PassFacts) -> Vec:
    """What a replica counts for in its owner's usage (as facts.collect counts it)."""
    cpu, mem = shard_held(m, m.profile(r.profile))
    gpus = 0.0
    for sh in r.shards:
        gpus += sum(facts.slice_share.get(d, 1.0) for d in sh.gpus)
    n = len(r.shards)
    return (gpus, cpu * n, mem * n)


def toward_share(
    fair: FairShare, mine: float, victim_owner: str, need: Vec, inv: Inventory
) -> bool:
    """Between borrowers of one class, for a model below its minimum (rule R6): the taker's
    share with its new replica (`mine`) stays at or below the victim owner's share without
    the victim (Kueue's LessThanOrEqualToFinalShare)."""
    return mine <= fair.share(victim_owner, inv, (-need[0], -need[1], -need[2])) + 1e-9
