"""The state one pass works on, in a few small parts, each written by the steps named on it.

- `Counts`: per model, what it wants and what it has (desired, target, live, placed).
- `Holds`: who gave way to whom and who waits for its victims (rule R5); the room kept for
  the model that preempted is `Reservations` (reservations.py).
- `Ledger`: what the pass decides: stops, starts, moves, roll-outs, and the one set of
  replicas the pass stops (the victim pool reads that same set).
- `PassState`: the snapshot, the inventory and the placer, the three parts above, and what
  the growth step learns along the way (`Turns`).

The steps (decide.STEPS) are functions of a PassState; nothing here decides anything.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from scheduler.core.codes import PendingCode, StartCode, StopCode
from scheduler.core.fairshare import FairShare
from scheduler.core.held_back import HeldBack
from scheduler.core.inventory import Inventory
from scheduler.core.models import (
    Hold,
    Model,
    ProfileTrial,
    Replica,
    Settings,
    Snapshot,
    StartAction,
    StopAction,
    StoppedReplica,
)
from scheduler.core.placement import Placement, Placer
from scheduler.core.plugins import Plugins, default_filters, default_scorers
from scheduler.core.preemption import VictimPool
from scheduler.core.reservations import Reservations
from scheduler.core.scaling import Want, replacements, want
from scheduler.core.turn_order import ModelOrder
from scheduler.core.warmth import Warmth

# A reason: its code (codes.py) and the sentence an operator reads.
StopWhy = tuple[StopCode, str]
StartWhy = tuple[StartCode, str]
PendingWhy = tuple[PendingCode, str]


class Counts:
    """Per model: what the signals ask, what placement grows to, and what it has."""

    def __init__(self) -> None:
        self.wants: dict[str, Want] = {}
        self.desired: dict[str, int] = {}  # what the signals ask (the status's `desired`)
        # What placement grows to: the count the signals ask. The scale-down window only keeps
        # replicas (desired can be above it); it never starts one, also not when a replica
        # being replaced stops counting later in the pass.
        self.target: dict[str, int] = {}
        self.live: dict[str, int] = {}  # replicas that count; retiring steps lower it
        self.placed: dict[str, int] = {}  # replicas placed this pass
        self.timed_out: dict[str, int] = {}  # replicas stopped past their load grace
        # Replicas of a profile since removed from their model: they hold what they hold but
        # no longer count; a current profile replaces them, and they go once it runs.
        self.stale: dict[str, list[Replica]] = {}

    def short(self, name: str) -> bool:
        """Whether the model still misses replicas in this pass."""
        return (
            name in self.target and self.live[name] + self.placed.get(name, 0) < self.target[name]
        )


class Holds:
    """Room that preemption freed is the preemptor's (rule R5): the victims' models are held
    back, and the preemptor waits for its victims rather than preempting again."""

    def __init__(self, until: datetime) -> None:
        self.until = until  # when a hold given in this pass ends
        self.honoured: dict[str, Hold] = {}  # held model -> its hold, honoured in this pass
        self.handed_on: dict[str, Hold] = {}  # the holds the plan hands to the next pass
        self.on_their_way: dict[str, list[str]] = {}  # preemptor -> its victims still stopping
        self.giving_way: dict[str, str] = {}  # victim model -> whom its stopping replica is for
        self.claimants: set[str] = set()  # models some hold is for

    def give(self, victim_model: str, preemptor: str) -> None:
        hold = Hold.model_validate({"until": self.until, "for": preemptor})
        self.handed_on[victim_model] = self.honoured[victim_model] = hold


class Ledger:
    """What the pass decides. Every stop goes through `stop`, so the set of stopped replicas
    and the victim pool's grouping of the others never disagree."""

    def __init__(self, replicas: dict[str, Replica], stamp: str) -> None:
        self.stops: list[StopAction] = []
        self.starts: list[StartAction] = []
        self.stopped: set[str] = set()  # replicas this pass stops: never a victim again
        self.retired: set[str] = set()  # no longer live: stopped, moving, on a draining node
        self.moves: dict[str, str] = {}  # replica -> its replacement, moves under way
        self.rollout: dict[str, str] = {}  # model -> progress of its replacements
        self.rolling: set[str] = set()  # models with replicas replaced by a rolling update
        self.stalled: dict[str, str] = {}  # model -> spec digest whose roll-out failed
        self.pool: VictimPool | None = None  # built by the first preemption attempt
        # Per model, replicas stopped past their load grace: its status shows them.
        self.timed_out: dict[str, list[StoppedReplica]] = {}
        self._replicas = replicas  # the snapshot's, by id (new ids must differ)
        self._stamp = stamp  # the pass's instant, in every new replica's id
        self._given: set[str] = set()  # ids this pass gave

    def stop(
        self,
        replica: str,
        model: str,
        why: StopWhy,
        preempted_for: str | None = None,
    ) -> None:
        self.stopped.add(replica)
        if self.pool is not None:
            self.pool.regroup(replica)
        code, reason = why
        if preempted_for is None:
            self.stops.append(StopAction(replica=replica, model=model, reason=reason, code=code))
        else:
            self.stops.append(
                StopAction(
                    replica=replica,
                    model=model,
                    reason=reason,
                    preempted_for=preempted_for,
                    code=code,
                )
            )

    def start(self, model: str, fitted: Placement, replica: str, why: StartWhy) -> None:
        code, reason = why
        self.starts.append(
            StartAction(
                model=model,
                profile=fitted.profile.name,
                replica=replica,
                shards=fitted.shards,
                reason=reason,
                code=code,
            )
        )

    def new_id(self, model: str) -> str:
        """A replica id no replica of the snapshot has and the pass has not given yet."""
        n = 0
        while True:
            key = f"{model}|{self._stamp}|{n}"
            rid = "r-" + hashlib.sha256(key.encode()).hexdigest()[:10]
            n += 1
            if rid not in self._replicas and rid not in self._given:
                self._given.add(rid)
                return rid


class Turns:
    """What the growth steps learn while models take their turns."""

    def __init__(self) -> None:
        # A model that has had its say: why it is pending and what its profiles ran into.
        self.outcome: dict[str, tuple[PendingWhy, list[ProfileTrial]]] = {}
        self.keys: dict[str, ModelOrder] = {}  # order keys, by model
        self.needs: dict[str, tuple[float, float, float]] = {}  # first profile's, by model
        self.fair: FairShare | None = None  # set when quotas are in play
        self.owing = False  # in the guarantee phase: only what is owed may be reclaimed
        self.held_back: dict[str, str] = {}  # why room that could be made was not
        self.why_held: HeldBack | None = None  # built for the first model finding no room


class PassState:
    def __init__(self, snapshot: Snapshot, extra: Plugins) -> None:
        self.snapshot = snapshot
        self.settings: Settings = snapshot.settings
        self.now: datetime = snapshot.now
        s = self.settings
        # Where models' weights are cached: read by placement and by the prefetch step.
        self.warmth = warmth = Warmth(snapshot.nodes, s.download_gbps, s.load_gbps)
        self.placer = Placer(
            default_filters(warmth) + list(extra.filters),
            default_scorers(warmth) + list(extra.scorers),
            len(snapshot.nodes),
            extra=extra.filters,
            settings=self.settings,
            warmth=warmth,
        )
        self.inv = Inventory.build(snapshot)
        self.counts = count(snapshot, self.inv)
        self.ledger = Ledger(self.inv.facts.replicas, snapshot.now.isoformat())
        self.holds = holds(snapshot, self.inv, self.counts)
        self.reservations = reservations(snapshot, self.inv, self.counts, self.holds)
        self.turns = Turns()
        self.ranks: dict[str, float] = {}  # replica -> how good its placement is (lower: better)
        self.steady: dict[str, bool] = {}  # model -> may its replicas be moved (defragment)

    def model(self, name: str) -> Model | None:
        return self.inv.facts.models.get(name)


def count(snapshot: Snapshot, inv: Inventory) -> Counts:
    counts = Counts()
    for m in snapshot.models:
        name = m.name  # read once: a pydantic attribute costs a dict lookup each time
        reps = inv.facts.by_model.get(name, [])
        old = inv.facts.stale.get(name)
        live = [r for r in reps if r not in old] if old else reps  # what counts as live
        w = want(
            m,
            snapshot.demand.get(name),
            snapshot.load.get(name),
            live,
            snapshot.recent_desired.get(name, []),
            snapshot.now,
            snapshot.settings,
            replacements(live, snapshot.specs.get(name), snapshot.moves),
        )
        counts.wants[name] = w
        counts.desired[name] = w.count
        counts.target[name] = min(w.count, w.recommended)
        if old:
            counts.stale[name] = old
        counts.live[name] = len(inv.facts.current.get(name, ()))  # stale ones do not count
    return counts


def holds(snapshot: Snapshot, inv: Inventory, counts: Counts) -> Holds:
    """Replicas stopped for a model and still on their way out: it waits for them (rule R5),
    and the model they belong to gives no more trouble until they are gone. A hold ends early
    once the model it was given to has what it asked for. Otherwise it is kept while that
    model still waits for its victims, and honoured once more in the pass after they are
    gone: the room goes to the model it was taken for even when preempt_hold_s is shorter
    than a stop takes (or 0)."""
    out = Holds(snapshot.now + timedelta(seconds=snapshot.settings.preempt_hold_s))
    for r in inv.facts.stopping_preempted:
        assert r.preempted_for is not None
        out.on_their_way.setdefault(r.preempted_for, []).append(r.id)
        out.giving_way.setdefault(r.model, r.preempted_for)
    target, live = counts.target, counts.live
    for name, h in sorted(snapshot.holds.items()):
        if h.for_ in target and live[h.for_] < target[h.for_]:
            out.honoured[name] = h
            if snapshot.now < h.until or h.for_ in out.on_their_way:
                out.handed_on[name] = h
    out.claimants = {h.for_ for h in out.honoured.values()}
    return out


def reservations(snapshot: Snapshot, inv: Inventory, counts: Counts, holds: Holds) -> Reservations:
    """The room kept for models that preempted for it, held back before any model places
    (rule R5). Kept while the model still misses replicas; released once it has what it
    asked for (its replica started there, or its demand fell)."""
    out = Reservations(snapshot.now)
    for name, victims in holds.on_their_way.items():
        out.victims[name] = victims
        out.lasting.add(name)  # kept while its victims stop
    target, live = counts.target, counts.live
    for name, kept in sorted(snapshot.reservations.items()):
        m = inv.facts.models.get(name)
        if m is None or not kept:
            continue  # a deleted model's room is nobody's
        if live[name] < target[name]:
            out.hold(inv, m, list(kept))
            continue
        devices = {(sh.node, d) for res in kept for sh in res.shards for d in sh.gpus}
        there = any(
            (sh.node, d) in devices
            for r in inv.facts.current.get(name, ())
            for sh in r.shards
            for d in sh.gpus
        )
        out.said[name] = (
            "room kept for it: its replica started there"
            if there
            else "room kept for it released: it has what it asked for"
        )
    return out
