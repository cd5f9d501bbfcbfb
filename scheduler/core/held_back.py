"""Why room that preemption could make for a model was not made.

`choose` already says when only more than `max_victims` victims would do. This module says
the two other reasons a feasible preemption is held back: the replicas that would make room
became ready less than `min_lifetime_s` ago, or the room is kept for another model that
preempted for it (reservations.py: room taken by preemption goes to the model it was taken
for).

It is worked out only for a model that found no room and no victims, and lazily: a pass where
every model places pays nothing; otherwise one look at each live replica's age per pass, then
per such model one placement trial while room is kept for others, and at most
_TRIES trials on nodes where young replicas run. Only the plain case is claimed: victims of a
lower class and no other owner's guarantee in the way (a second victim search with
min_lifetime_s 0, a second VictimPool, would cost as much as the preemption itself).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import islice

from scheduler.core.inventory import Inventory, owner_prefixes
from scheduler.core.models import CLASS_RANK, Model, Replica, Snapshot, rfc3339
from scheduler.core.placement import Placer
from scheduler.core.preemption import POOL_CAP, VictimPool
from scheduler.core.reservations import Reservations, kept_sentence

_SCAN = 64  # nodes with young replicas looked at per model
_TRIES = 4  # of them tried on a copy of the inventory


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


class HeldBack:
    """One per pass, built for the first model that finds no room; it shares the pass's
    victim pool's set of replicas already stopped."""

    def __init__(
        self,
        snapshot: Snapshot,
        inv: Inventory,
        placer: Placer,
        pool: VictimPool,
        short: Callable[[str], bool],
        reservations: Reservations,
    ) -> None:
        self.snapshot = snapshot
        self.short = short  # whether a model still misses replicas (room goes to it)
        self.reservations = reservations  # the room kept for models that preempted for it
        self.inv = inv
        self.placer = placer
        self.pool = pool
        self.min_lifetime = timedelta(seconds=snapshot.settings.min_lifetime_s)
        self._young: dict[str, list[tuple[int, Replica, Model]]] | None = None  # by node
        self._ids: set[str] = set()  # the young replicas

    def why(self, m: Model, trial: Inventory, live: int, limit: int) -> str | None:
        """A sentence naming the rule that held a feasible preemption for `m` back and what
        it would have taken, or None. `trial` is the room `m` found none in, `live` its
        replicas there."""
        return self.kept_for_others(m, trial) or self.too_young(m, trial, live, limit)

    # ------------------------------------------------------------ room kept for another

    def kept_for_others(self, m: Model, trial: Inventory) -> str | None:
        """Room kept for another model that preempted for it (rule R5) in which `m` would fit:
        while its victims still hold it, the victims `m` could have taken itself; once they
        are gone, the reserved room. Names the one model whose room alone would do, if one
        does."""
        rooms = self._rooms(m)
        if not rooms or not self._fits_in(trial, m, rooms, list(rooms)):
            return None  # not even all of that room together (one trial, the common answer)
        names = sorted(rooms)
        if len(names) > 1:
            alone = next((x for x in names if self._fits_in(trial, m, rooms, [x])), None)
            names = [alone] if alone is not None else names
        return f"held back: the room it would fit in is kept for {', '.join(names)} " + (
            self._kept_how(names, rooms)
        )

    def _rooms(self, m: Model) -> dict[str, list[str]]:
        """Per other model with room kept for it: its victims `m` could have taken, or none
        (its reserved room) once its victims are gone."""
        res = self.reservations
        rooms: dict[str, list[str]] = {}
        for x in res.kept.keys() | res.victims.keys():
            victims = res.victims.get(x, [])
            # Room for a model that has what it wants since is nobody's.
            if x == m.name or not (res.kept.get(x) or victims) or not self.short(x):
                continue
            if not victims:
                rooms[x] = []
                continue
            mine = [v for v in victims if self._takable(m, self.inv.facts.replicas[v].model)]
            if mine:
                rooms[x] = mine
        return rooms

    def _kept_how(self, names: list[str], rooms: dict[str, list[str]]) -> str:
        stopping = {r.id for r in self.inv.facts.stopping_preempted}
        victims = [v for x in names for v in rooms[x]]
        if not victims:
            kept = [k.res for x in names for k in self.reservations.kept[x]]
            return "(" + kept_sentence(kept).removeprefix("room kept for it ") + ")"
        n_stopping = sum(1 for v in victims if v in stopping)
        parts = []
        if n_stopping:
            parts.append(f"{_replicas(n_stopping)} preempted for it still stopping")
        if len(victims) > n_stopping:
            parts.append(f"{_replicas(len(victims) - n_stopping)} preempted for it in this pass")
        return f"({' and '.join(parts)})"

    def _fits_in(
        self, trial: Inventory, m: Model, rooms: dict[str, list[str]], names: list[str]
    ) -> bool:
        room = trial.clone()
        touched: set[str] = set()
        for x in names:
            if rooms[x]:
                for rid in rooms[x]:
                    touched.update(room.release(rid))
                continue
            for k in self.reservations.kept[x]:
                for node, devices, cpu, mem in k.held:
                    room.unreserve(node, devices, cpu, mem)
                    touched.add(node)
        return self.placer.fits(m, room, trial.version, touched)

    def _takable(self, m: Model, victim_model: str) -> bool:
        """Whether `m` could have preempted a replica of `victim_model` itself by the class
        rule alone: a lower class, and no other owner's guarantee in the way (the rarer ways,
        same class above a minimum or reclaiming what was borrowed, are not claimed)."""
        vm = self.inv.facts.models.get(victim_model)
        if vm is None or CLASS_RANK[vm.class_] >= CLASS_RANK[m.class_]:
            return False
        if vm.owner == m.owner or not self.inv.facts.quotas:
            return True
        return not any(
            (q := self.inv.facts.quotas.get(p)) is not None
            and any(
                v is not None
                for v in (q.guarantee.gpus, q.guarantee.cpu_cores, q.guarantee.memory_gb)
            )
            for p in owner_prefixes(vm.owner)
        )

    # ------------------------------------------------------------ min_lifetime_s

    def too_young(self, m: Model, trial: Inventory, live: int, limit: int) -> str | None:
        """Replicas the victim pool left out because they became ready less than
        min_lifetime_s ago. Only the plain case is claimed (a lower class, no other owner's
        guarantee in the way: _takable) for a profile of whole GPUs on one node: per node where
        such a replica runs, it and the pass's own candidates there, the largest first up to
        max_victims, tried on a copy. Bounded: a few nodes looked at and tried per model."""
        need = min((p.gpus for p in m.profiles if not p.is_mig and p.shards == 1), default=None)
        young = self._young_by_node()
        if need is None or not young:
            return None
        stopped = self.pool.stopped
        takable: dict[str, bool] = {}  # victim model -> may m take it (per call: m varies)
        others: dict[str, list[tuple[int, Replica]]] | None = None  # the pass's candidates
        tries = _TRIES
        for nid, here in islice(young.items(), _SCAN):
            mine = []
            for n, r, vm in here:
                ok = takable.get(vm.name)
                if ok is None:
                    ok = takable[vm.name] = self._takable(m, vm.name)
                if ok and r.id not in stopped:
                    mine.append((n, r))
            ns = trial.nodes.get(nid)
            if not mine or ns is None:
                continue
            if others is None:
                others = {}
                for v in islice(self.pool.candidates(m, trial, live), POOL_CAP):
                    for sh in v.replica.shards:
                        others.setdefault(sh.node, []).append((len(sh.gpus), v.replica))
            gone = sorted(mine + others.get(nid, []), key=lambda t: (-t[0], t[1].id))[:limit]
            if len(ns.free_gpus) + sum(n for n, _ in gone) < need:
                continue  # not enough GPUs here even then: no copy needed
            if self._fits_after(m, trial, [r for _, r in gone]):
                # Spare whichever is not needed (the smallest first), as choose prunes.
                for t in sorted(gone, key=lambda t: (t[0], t[1].id)):
                    fewer = [x for x in gone if x[1] is not t[1]]  # compiled, tuples lose identity
                    if fewer and self._fits_after(m, trial, [r for _, r in fewer]):
                        gone = fewer
                ready = [
                    r.ready_at for _, r in gone if r.ready_at is not None and r.id in self._ids
                ]
                if ready:
                    return self._sentence(ready)
            tries -= 1
            if tries == 0:
                break
        return None

    def _fits_after(self, m: Model, trial: Inventory, gone: list[Replica]) -> bool:
        room = trial.clone()
        touched: set[str] = set()
        for r in gone:
            touched.update(room.release(r.id))
        return self.placer.fits(m, room, trial.version, touched)

    def _sentence(self, ready: list[datetime]) -> str:
        until = max(ready) + self.min_lifetime
        n = len(ready)
        return (
            f"held back: {_replicas(n)} that would make room became ready less than "
            f"min_lifetime_s ({self.min_lifetime.total_seconds():g} s) ago; "
            f"{'they' if n > 1 else 'it'} may give way from {rfc3339(until)}"
        )

    def _young_by_node(self) -> dict[str, list[tuple[int, Replica, Model]]]:
        """Per node, the live replicas ready less than min_lifetime_s ago (GPUs there, the
        replica, its model); worked out once a pass."""
        if self._young is None:
            self._young = {}
            if self.min_lifetime:
                fresh_after = self.snapshot.now - self.min_lifetime
                for lr in self.inv.facts.live:
                    ready = lr.ready_at
                    if ready is not None and ready > fresh_after and not lr.preempted_for:
                        r, vm = lr.replica, lr.model
                        self._ids.add(lr.id)
                        for sh in r.shards:
                            self._young.setdefault(sh.node, []).append((len(sh.gpus), r, vm))
        return self._young
