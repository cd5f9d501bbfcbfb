"""One pass: snapshot in, plan out (scaling, scale-down, placement, preemption)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import NamedTuple

from scheduler.core.fairshare import FairShare
from scheduler.core.held_back import HeldBack
from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.mig_advice import mig_advice
from scheduler.core.models import (
    CLASS_RANK,
    Hold,
    Model,
    ModelStatus,
    Plan,
    ProfileTrial,
    Replica,
    Snapshot,
    StartAction,
    StopAction,
    rfc3339,
)
from scheduler.core.placement import Placement, Placer, commit
from scheduler.core.plugins import Plugins, default_filters, default_scorers
from scheduler.core.preemption import (
    VictimPool,
    choose,
    stop_reason,
    within_guarantee,
)
from scheduler.core.retirement import Retirement
from scheduler.core.scaling import Want, want
from scheduler.core.sharing import ModelOrder, SharingPhases


class TurnOrder(NamedTuple):
    """The order models take their turn: those that place within their owner's guarantee
    first, among them those others are held for; then the model's own order."""

    not_owed: bool
    not_claimed: bool
    model: ModelOrder


def decide(snapshot: Snapshot, plugins: Plugins | None = None) -> Plan:
    return _Pass(snapshot, plugins or Plugins()).run()


def _new_id(model: str, now: str, existing: dict[str, Replica], taken: set[str]) -> str:
    """A replica id no replica of the snapshot has and the pass has not given yet."""
    n = 0
    while True:
        rid = "r-" + hashlib.sha256(f"{model}|{now}|{n}".encode()).hexdigest()[:10]
        n += 1
        if rid not in existing and rid not in taken:
            taken.add(rid)
            return rid


def _order_key(m: Model, live: int, reach: int) -> ModelOrder:
    return ModelOrder(
        -CLASS_RANK[m.class_],
        live >= m.scaling.min,
        reach,
        -profile_need(m.profiles[0])[0],
        m.name,
    )


def _start_reason(m: Model, w: Want, count: int) -> str:
    # "scale up: 3 replicas: ttft p90 840 ms > 500 ms objective (...), 2 of 3 replicas"
    return f"scale up: {w.why}, {count} of {w.count} replicas"


def _hold_back(inv: Inventory, future: list[Placement]) -> None:
    """Reserve the devices of placements-to-be that are free now (the rest are the victims')."""
    for placement in future:
        for sh in placement.shards:
            free = [d for d in sh.gpus if inv.is_free(sh.node, d)]
            if free:
                inv.reserve(sh.node, free)


class _Pass(Retirement, SharingPhases):
    """The working state of one pass; `run()` is the whole of it, in order."""

    def __init__(self, snapshot: Snapshot, extra: Plugins) -> None:
        self.snapshot = snapshot
        self.settings = snapshot.settings
        self.now = snapshot.now
        self.stamp = snapshot.now.isoformat()  # in every new replica's id
        self.placer = Placer(
            default_filters() + list(extra.filters),
            default_scorers() + list(extra.scorers),
            len(snapshot.nodes),
            extra=extra.filters,
            settings=self.settings,
        )
        self.inv = inv = Inventory.build(snapshot)
        self.desired: dict[str, int] = {}
        self.target: dict[str, int] = {}
        self.wants: dict[str, Want] = {}
        self.live: dict[str, int] = {}
        # Replicas of a profile since removed from their model: they hold what they hold but
        # no longer count; a current profile replaces them, and they go once it runs.
        self.stale: dict[str, list[Replica]] = {}
        for m in snapshot.models:
            name = m.name  # read once: a pydantic attribute costs a dict lookup each time
            reps = inv.facts.by_model.get(name, [])
            old = inv.facts.stale.get(name)
            w = want(
                m,
                snapshot.demand.get(name),
                snapshot.load.get(name),
                [r for r in reps if r not in old] if old else reps,  # what counts as live
                snapshot.recent_desired.get(name, []),
                self.now,
                self.settings,
            )
            self.wants[name] = w
            self.desired[name] = w.count
            # What placement grows to: the count the signals ask. The scale-down window only
            # keeps replicas (desired can be above it); it never starts one, also not when a
            # replica being replaced stops counting later in the pass.
            self.target[name] = min(w.count, w.recommended)
            if old:
                self.stale[name] = old
            self.live[name] = len(inv.facts.current.get(name, ()))  # stale ones do not count
        self.taken_ids: set[str] = set()  # given by this pass (the snapshot's: facts.replicas)
        self.stops: list[StopAction] = []
        self.starts: list[StartAction] = []
        # Replicas stopped for a model and still on their way out: it waits for them (rule R5),
        # and the model they belong to gives no more trouble until they are gone (held).
        self.on_their_way: dict[str, list[str]] = {}  # preemptor -> its victims still stopping
        self.giving_way: dict[str, str] = {}  # victim model -> whom its stopping replica is for
        for r in inv.facts.stopping_preempted:
            assert r.preempted_for is not None
            self.on_their_way.setdefault(r.preempted_for, []).append(r.id)
            self.giving_way.setdefault(r.model, r.preempted_for)
        # A hold ends early once the model it was given to has what it asked for. Otherwise it
        # is kept while that model still waits for its victims, and honoured once more in the
        # pass after they are gone: the room goes to the model it was taken for even when
        # preempt_hold_s is shorter than a stop takes (or 0).
        self.held: dict[str, Hold] = {}  # honoured in this pass
        self.holds: dict[str, Hold] = {}  # handed on in the plan
        for name, h in sorted(snapshot.holds.items()):
            if h.for_ in self.target and self.live[h.for_] < self.target[h.for_]:
                self.held[name] = h
                if self.now < h.until or h.for_ in self.on_their_way:
                    self.holds[name] = h
        self.hold_until = self.now + timedelta(seconds=self.settings.preempt_hold_s)
        self.spoken_for: set[str] = set()  # replicas this pass already stops
        self.retired: set[str] = set()  # timed out, or on a draining node: not live any more
        self.timed_out: dict[str, int] = {}  # model -> replicas stopped past their load grace
        self.pool: VictimPool | None = None  # built on the first preemption attempt only
        self.claimants = {h.for_ for h in self.held.values()}
        self.keys: dict[str, ModelOrder] = {}  # order keys, by model
        self.placed: dict[str, int] = {}  # replicas placed this pass, by model
        # A model that has had its say: its pending sentence and what its profiles ran into.
        self.outcome: dict[str, tuple[str | None, list[ProfileTrial]]] = {}
        self.fair: FairShare  # set when quotas are in play
        self.owing = False  # in the guarantee phase
        self.needs: dict[str, tuple[float, float, float]] = {}  # first profile's, by model
        self.held_back: dict[str, str] = {}  # why room that could be made was not
        self.why_held: HeldBack | None = None  # built for the first model finding no room
        self.rollout: dict[str, str] = {}  # model -> progress of its replacements
        self.rolling: set[str] = set()  # models with replicas replaced by a rolling update
        self.stalled: dict[str, str] = {}  # model -> spec digest whose roll-out failed
        self.ranks: dict[str, float] = {}  # replica -> how good its placement is (lower: better)
        self.moves: dict[str, str] = {}  # replica -> its replacement, moves under way
        self.steady: dict[str, bool] = {}  # model -> may its replicas be moved (defragment)

    # ------------------------------------------------------------ the pass

    def run(self) -> Plan:
        counted = dict(self.live)  # the status reports replicas that count, retired or not
        # Models whose key was deleted: their statuses, and their replicas once the grace ends.
        statuses: dict[str, ModelStatus] = self.retire_deleted()
        self.retire()
        self.scale_down()
        self.replace_stale()
        # Only models short of their target take turns; where the others sort never matters.
        live, target = self.live, self.target
        short = [m for m in self.snapshot.models if live[(n := m.name)] < target[n]]
        order = sorted(short, key=self.order_key)
        if self.inv.facts.quotas:
            self.fair = FairShare(self.snapshot, self.inv)
            self.guarantees_first(order)
            self.share_the_rest(order)
        else:
            for m in order:
                self.turn(m, None)
        # Short of room (not held, not waiting for victims), in turn order.
        waiting = [m for m in order if m.name in self.outcome and self.outcome[m.name][1]]
        # Statuses are frozen, and most models share theirs with others ("1 replica: minimum
        # 1"): one object per distinct status (without trials) saves validating and holding
        # each again, a third of what a pass allocates.
        made: dict[tuple[int, int, str | None, str, int], ModelStatus] = {}
        for m in self.snapshot.models:
            name = m.name
            pending, tried = self.outcome.get(name, (None, []))
            w = self.wants[name]
            key = (self.desired[name], counted[name], pending, w.why, w.recommended)
            status = None if tried else made.get(key)
            if status is None:
                status = ModelStatus(
                    desired=key[0],
                    live=key[1],
                    pending=pending,
                    tried=tried,
                    why=w.why,
                    recommended=w.recommended,
                )
                if not tried:
                    made[key] = status
            statuses[name] = status
        self.consolidate()  # on the free room every model left
        self.defragment(waiting)
        for name, progress in self.rollout.items():
            statuses[name] = statuses[name].model_copy(update={"rollout": progress})
        self.stops.sort(key=lambda a: a.replica)
        plan = Plan(
            actions=[*self.stops, *self.starts],
            models=dict(sorted(statuses.items())),
            holds=self.holds,
            stalled=dict(sorted(self.stalled.items())),
            moves=dict(sorted(self.moves.items())),
        )
        # Pending MIG demand a drained MIG GPU could serve if re-partitioned: advice only.
        return plan.model_copy(update={"advice": mig_advice(self.snapshot, plan)})

    def new_id(self, model: str) -> str:
        return _new_id(model, self.stamp, self.inv.facts.replicas, self.taken_ids)

    def order_key(self, m: Model) -> TurnOrder:
        """Models that place within their owner's guarantee go first, and among them those
        others are held for: that room is their owner's whatever the classes (they would take
        it back from a borrower anyway, rule R2). Else a higher class that only borrows takes
        it and is reclaimed from in turn, pass after pass, or starts and loses a replica at
        once. Asked only of models short of their target."""
        have = self.live[m.name]
        owed = within_guarantee(m, self.inv)
        key = self.keys[m.name] = _order_key(m, have, self.placer.reach(m, self.inv))
        return TurnOrder(not owed, not (owed and m.name in self.claimants), key)

    # ------------------------------------------------------------ one model

    def grow(self, m: Model, cap: int | None = None) -> tuple[str | None, list[ProfileTrial]]:
        """Place up to `cap` of the model's missing replicas, or preempt for them: its pending
        sentence (None: placed them) and what its profiles ran into."""
        if m.name in self.held:
            h = self.held[m.name]
            if self.now < h.until:
                return f"held until {rfc3339(h.until)} after yielding to {h.for_}", []
            return f"held one more pass after yielding to {h.for_}", []
        if m.name in self.giving_way:
            return f"held while its replicas preempted for {self.giving_way[m.name]} stop", []
        want, have = self.target[m.name], self.live[m.name]
        if m.name in self.on_their_way:
            self.reserve(m, self.on_their_way[m.name], want - have)
            return "waiting for preempted replicas to stop", []
        placed = self.placed.get(m.name, 0)
        turn = 0
        while have + placed < want and (cap is None or turn < cap):
            out = self.placer.place(m, self.inv)
            if out.placement is None:
                pending = "; ".join(out.notes)
                # In the guarantee phase only what is owed may be reclaimed.
                ask = cap - turn if self.owing and cap is not None else want - have - placed
                if self.preempt_for(m, ask, have + placed):
                    pending = "waiting for preempted replicas to stop"
                elif m.name in self.held_back:
                    pending += "; " + self.held_back[m.name]
                return pending, out.trials
            commit(m, out.placement, self.inv)
            placed += 1
            turn += 1
            self.placed[m.name] = placed
            self.starts.append(
                StartAction(
                    model=m.name,
                    profile=out.placement.profile.name,
                    replica=self.new_id(m.name),
                    shards=out.placement.shards,
                    reason=_start_reason(m, self.wants[m.name], have + placed)
                    if m.name not in self.rolling
                    else "rolling update: a replica on the model's new spec",
                )
            )
        return None, []

    # ------------------------------------------------------------ preemption

    def stop(self, replica_id: str) -> None:
        if self.pool is not None:
            self.pool.exclude(replica_id)
        else:
            self.spoken_for.add(replica_id)

    def preempt_for(self, m: Model, missing: int, live: int) -> bool:
        """Victims for every replica still missing, each set tried on the room the earlier
        ones leave (so no room is preempted twice for two models); the free room the model
        counts on besides is held back. Whether any replica was stopped."""
        if self.settings.max_victims == 0:
            return False
        if self.pool is None:
            self.pool = VictimPool(self.snapshot, self.inv, self.spoken_for)
            if self.inv.facts.quotas:
                self.pool.fair = self.fair
        trial = self.inv.clone()
        gone = False
        future: list[Placement] = []  # where the missing replicas will go
        for _ in range(missing):
            fitted = self.placer.place(m, trial, explain=False).placement
            if fitted is None:
                cands = self.pool.candidates(m, trial, live + len(future))
                over: list[int] = []
                limit = self.settings.max_victims
                chosen = choose(m, cands, trial, limit, self.placer, over)
                if not chosen:
                    if over and not gone:
                        self.held_back[m.name] = (
                            f"preempting would take up to {min(over)} replicas, "
                            f"more than max_victims ({limit})"
                        )
                    elif not gone:
                        self.explain_held_back(m, trial, live + len(future), limit)
                    break
                for v in chosen:
                    self.stop(v.replica.id)
                    trial.release(v.replica.id)
                    self.stops.append(
                        StopAction(
                            replica=v.replica.id,
                            model=v.model.name,
                            reason=stop_reason(v, m),
                            preempted_for=m.name,
                        )
                    )
                    hold = Hold.model_validate({"until": self.hold_until, "for": m.name})
                    self.holds[v.model.name] = self.held[v.model.name] = hold
                gone = True
                fitted = self.placer.place(m, trial, explain=False).placement
                if fitted is None:
                    break
            commit(m, fitted, trial)
            future.append(fitted)
        if gone:
            _hold_back(self.inv, future)
            for placement in future:  # its owner holds them from now on (guarantee, limits)
                self.inv.charge(m.owner, profile_need(placement.profile))
        return gone

    def explain_held_back(self, m: Model, trial: Inventory, live: int, limit: int) -> None:
        """Whether min_lifetime_s or room kept for another model held a preemption back."""
        assert self.pool is not None
        if self.why_held is None:
            # The test closes over the pass's dicts, not over the pass: a pass that refers to
            # itself is freed only by the cyclic collector (tests/core/test_pass_garbage.py).
            target, have, placed = self.target, self.live, self.placed
            self.why_held = HeldBack(
                self.snapshot,
                self.inv,
                self.placer,
                self.pool,
                lambda x: x in target and have[x] + placed.get(x, 0) < target[x],
            )
        why = self.why_held.why(m, trial, live, limit, self.stops)
        if why is not None:
            self.held_back[m.name] = why

    def reserve(self, m: Model, gone: list[str], missing: int) -> None:
        """Keep for `m` the free room it will need beside what `gone` frees, for the rest of
        the pass: placed in a trial, and whatever of that is free now is held back."""
        trial = self.inv.clone()
        for rid in gone:
            trial.release(rid)
        future: list[Placement] = []
        for _ in range(missing):
            fitted = self.placer.place(m, trial, explain=False).placement
            if fitted is None:
                break
            commit(m, fitted, trial)
            future.append(fitted)
        _hold_back(self.inv, future)
        for placement in future:  # its owner holds them already (guarantee, limits)
            self.inv.charge(m.owner, profile_need(placement.profile))
