"""Room taken is room given (rule R5): the room a preemption frees is kept for the model it
was taken for, in this pass and the next ones, until that model starts there, no longer
needs it, or the bound passes.

A reservation is one replica's room: where it would go (devices by id, and the CPU and memory
each shard asks) and what it counts against its owner's quota. The pass holds every kept
reservation back from its inventory before any model places (`honour`), so every other model
sees it as taken; the model it is kept for gets it back on its turn (`open`), and what it did
not take is held back again for the models after it (`close`). The plan hands on the ones
still kept (`Plan.reservations`), as it hands on holds, and says in the model's status what is
kept for it or why it was released.
"""

from __future__ import annotations

from datetime import datetime

from scheduler.core.inventory import Inventory, Vec, profile_need
from scheduler.core.models import Amount, Model, Reservation, Shard, rfc3339
from scheduler.core.placement import Placement


class Kept:
    """One reservation as this pass holds it back: what the inventory really held (devices
    that were free, CPU and memory beyond what its victims still hold), so that giving it
    back gives exactly that."""

    def __init__(self, res: Reservation, hand_on: bool) -> None:
        self.res = res
        self.hand_on = hand_on  # False: kept for this pass only
        self.held: list[tuple[str, list[str], float, float]] = []  # node, devices, cpu, mem
        q = res.quota
        self.quota: Vec = (q.gpus or 0.0, q.cpu_cores or 0.0, q.memory_gb or 0.0)
        self.open = False

    def devices(self) -> set[tuple[str, str]]:
        return {(sh.node, d) for sh in self.res.shards for d in sh.gpus}


class Reservations:
    """The pass's reservations, by the model they are kept for."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.kept: dict[str, list[Kept]] = {}
        self.victims: dict[str, list[str]] = {}  # model -> its victims still holding room
        self.lasting: set[str] = set()  # models whose reservations outlast this pass anyway
        self.said: dict[str, str] = {}  # model -> what its status says about its room

    # ------------------------------------------------------------ holding back

    def hold(self, inv: Inventory, m: Model, made: list[Reservation], hand_on: bool = True) -> None:
        """Hold the model's reservations back from `inv`: devices free now, CPU and memory
        beyond what its victims still hold on that node, and its quota."""
        credit = _victims_room(inv, self.victims.get(m.name, []))
        for res in made:
            kept = Kept(res, hand_on)
            self._hold(inv, m, kept, credit)
            self.kept.setdefault(m.name, []).append(kept)

    def _hold(self, inv: Inventory, m: Model, kept: Kept, credit: dict[str, list[float]]) -> None:
        kept.held = []
        for sh in kept.res.shards:
            if sh.node not in inv.nodes:
                continue
            cpu, mem = sh.cpu_cores or 0.0, sh.memory_gb or 0.0
            c = credit.get(sh.node)
            if c is not None:  # the victims' own CPU and memory are theirs until they go
                used_cpu, used_mem = min(cpu, c[0]), min(mem, c[1])
                c[0] -= used_cpu
                c[1] -= used_mem
                cpu, mem = cpu - used_cpu, mem - used_mem
            held = inv.reserve(sh.node, sh.gpus, cpu, mem)
            kept.held.append((sh.node, held, cpu, mem))
        inv.charge(m.owner, kept.quota)
        kept.open = False

    def open(self, inv: Inventory, m: Model) -> list[Kept]:
        """Give the model its kept room back for its turn."""
        mine = self.kept.get(m.name, [])
        for kept in mine:
            if not kept.open:
                for node, devices, cpu, mem in kept.held:
                    inv.unreserve(node, devices, cpu, mem)
                inv.charge(m.owner, (-kept.quota[0], -kept.quota[1], -kept.quota[2]))
                kept.open = True
        return mine

    def close(self, inv: Inventory, m: Model, placed: list[Placement], short: bool) -> None:
        """After the model's turn: a replica placed on a reservation's room used it up, and so
        did a reservation made in the turn on the same room; the rest is held back again while
        the model still misses replicas, and released once it has what it asked for."""
        mine = self.kept.get(m.name)
        if not mine or not any(k.open for k in mine):
            return
        fresh = [k for k in mine if not k.open]  # made in this turn (held already)
        taken = {(sh.node, d) for p in placed for sh in p.shards for d in sh.gpus}
        superseded = {dev for k in fresh for dev in k.devices()}
        opened = [k for k in mine if k.open]
        left = [k for k in opened if not (k.devices() & taken) and not (k.devices() & superseded)]
        if any(k.devices() & taken for k in opened):
            self.said[m.name] = "room kept for it: its replica starts there"
        self.kept[m.name] = fresh
        if not short:
            if left and m.name not in self.said:
                self.said[m.name] = "room kept for it released: it placed elsewhere"
            elif left:
                self.said[m.name] = "room kept for it released: it has what it asked for"
            return
        credit = _victims_room(inv, self.victims.get(m.name, []))
        for kept in left:
            self._hold(inv, m, kept, credit)
            self.kept[m.name].append(kept)

    # ------------------------------------------------------------ the plan

    def handed_on(self) -> dict[str, list[Reservation]]:
        """The reservations the plan hands to the next pass: those made in this pass and those
        whose bound has not passed or whose victims still stop."""
        out: dict[str, list[Reservation]] = {}
        for name, mine in sorted(self.kept.items()):
            keep = [
                k.res
                for k in mine
                if k.hand_on and (name in self.lasting or self.now < k.res.until)
            ]
            if keep:
                out[name] = keep
            for k in mine:
                if k.hand_on and k.res not in keep and name not in self.said:
                    self.said[name] = (
                        f"room kept for it released: not started by {rfc3339(k.res.until)} "
                        "(preempt_hold_s) and the pass after its victims were gone"
                    )
        for name, keep in out.items():
            self.said[name] = kept_sentence(keep)
        return out

    def room_of(self, name: str) -> list[Kept]:
        return self.kept.get(name, [])


def kept_sentence(kept: list[Reservation]) -> str:
    where: dict[str, list[str]] = {}
    for res in kept:
        for sh in res.shards:
            where.setdefault(sh.node, []).extend(sh.gpus)
    room = "; ".join(f"{n}: {', '.join(ds)}" if ds else n for n, ds in sorted(where.items()))
    since = min(r.since for r in kept)
    return f"room kept for it on {room}, preempted for it at {rfc3339(since)}"


def made(now: datetime, until: datetime, placements: list[Placement]) -> list[Reservation]:
    """One reservation per replica to come: where it would go and what it counts for."""
    out = []
    for p in placements:
        prof = p.profile
        need = profile_need(prof)
        shards = [
            Shard(
                node=sh.node, gpus=list(sh.gpus), cpu_cores=prof.cpu_cores, memory_gb=prof.memory_gb
            )
            for sh in p.shards
        ]
        quota = Amount(gpus=need[0], cpu_cores=need[1], memory_gb=need[2])
        out.append(Reservation(since=now, until=until, shards=shards, quota=quota))
    return out


def _victims_room(inv: Inventory, victims: list[str]) -> dict[str, list[float]]:
    """CPU and memory per node that the victims still hold (they are the model's to come)."""
    if not victims:
        return {}
    trial = inv.clone()
    touched: set[str] = set()
    for rid in victims:
        touched.update(trial.release(rid))
    out: dict[str, list[float]] = {}
    for nid in touched:
        a, b = trial.nodes[nid], inv.nodes[nid]
        out[nid] = [a.free_cpu - b.free_cpu, a.free_mem - b.free_mem]
    return out
