"""One pass: snapshot in, plan out (scaling, scale-down, placement, preemption)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.mig_advice import mig_advice
from scheduler.core.models import (
    CLASS_RANK,
    Demand,
    Hold,
    Model,
    ModelStatus,
    Plan,
    ProfileTrial,
    Snapshot,
    StartAction,
    StopAction,
    rfc3339,
)
from scheduler.core.placement import Placement, Placer, commit
from scheduler.core.plugins import Plugins, default_filters, default_scorers
from scheduler.core.preemption import VictimPool, choose, within_guarantee
from scheduler.core.scaling import desired_replicas

OrderKey = tuple[bool, bool, tuple[int, bool, int, float, str]]


def decide(snapshot: Snapshot, plugins: Plugins | None = None) -> Plan:
    return _Pass(snapshot, plugins or Plugins()).run()


def _new_id(model: str, now: str, taken: set[str]) -> str:
    n = 0
    while True:
        rid = "r-" + hashlib.sha256(f"{model}|{now}|{n}".encode()).hexdigest()[:10]
        n += 1
        if rid not in taken:
            taken.add(rid)
            return rid


def _order_key(m: Model, live: int, reach: int) -> tuple[int, bool, int, float, str]:
    """Higher classes first, then models below their minimum. Within that, the models that
    can use the fewest devices (most constrained first), then the larger replica first
    (first-fit decreasing: small ones fill the gaps big ones leave, not the reverse)."""
    return (
        -CLASS_RANK[m.class_],
        live >= m.scaling.min,
        reach,
        -profile_need(m.profiles[0])[0],
        m.name,
    )


def _start_reason(m: Model, demand: Demand | None, count: int, want: int) -> str:
    load = demand.inflight + demand.queued if demand is not None else 0
    why = f"{load} requests" if load else f"minimum {m.scaling.min}"
    return f"scale up: {why}, {count} of {want} replicas"


def _hold_back(inv: Inventory, future: list[Placement]) -> None:
    """Reserve the devices of placements-to-be that are free now (the rest are the victims')."""
    for placement in future:
        for sh in placement.shards:
            free = [d for d in sh.gpus if inv.is_free(sh.node, d)]
            if free:
                inv.reserve(sh.node, free)


class _Pass:
    """The working state of one pass; `run()` is the whole of it, in order."""

    def __init__(self, snapshot: Snapshot, extra: Plugins) -> None:
        self.snapshot = snapshot
        self.settings = snapshot.settings
        self.now = snapshot.now
        self.placer = Placer(
            default_filters() + list(extra.filters),
            default_scorers() + list(extra.scorers),
            len(snapshot.nodes),
            extra=bool(extra.filters),
        )
        self.inv = inv = Inventory.build(snapshot)
        grace = self.settings.eviction_grace_s
        self.desired: dict[str, int] = {}
        self.live: dict[str, int] = {}
        for m in snapshot.models:
            reps = inv.by_model.get(m.name, [])
            demand = snapshot.demand.get(m.name)
            self.desired[m.name] = desired_replicas(m, demand, reps, self.now, grace)
            self.live[m.name] = inv.live_count.get(m.name, 0)
        self.taken_ids = set(inv.replicas)
        self.stops: list[StopAction] = []
        self.starts: list[StartAction] = []
        # Replicas stopped for a model and still on their way out: it waits for them (rule 5),
        # and the model they belong to gives no more trouble until they are gone (held).
        self.on_their_way: dict[str, list[str]] = {}  # preemptor -> its victims still stopping
        self.giving_way: dict[str, str] = {}  # victim model -> whom its stopping replica is for
        for r in inv.stopping_preempted:
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
            if h.for_ in self.desired and self.live[h.for_] < self.desired[h.for_]:
                self.held[name] = h
                if self.now < h.until or h.for_ in self.on_their_way:
                    self.holds[name] = h
        self.hold_until = self.now + timedelta(seconds=self.settings.preempt_hold_s)
        self.spoken_for: set[str] = set()  # replicas this pass already stops
        self.pool: VictimPool | None = None  # built on the first preemption attempt only
        self.claimants = {h.for_ for h in self.held.values()}

    # ------------------------------------------------------------ the pass

    def run(self) -> Plan:
        statuses: dict[str, ModelStatus] = self.retire()
        self.scale_down()
        for m in sorted(self.snapshot.models, key=self.order_key):
            want, have = self.desired[m.name], self.live[m.name]
            pending, tried = self.grow(m) if have < want else (None, [])
            statuses[m.name] = ModelStatus(desired=want, live=have, pending=pending, tried=tried)
        self.stops.sort(key=lambda a: a.replica)
        plan = Plan(
            actions=[*self.stops, *self.starts],
            models=dict(sorted(statuses.items())),
            holds=self.holds,
        )
        # Pending MIG demand a drained MIG GPU could serve if re-partitioned: advice only.
        return plan.model_copy(update={"advice": mig_advice(self.snapshot, plan)})

    def retire(self) -> dict[str, ModelStatus]:
        """Stop the replicas of models whose key was deleted, once the grace has passed (a key
        deleted by mistake can be put back in time); their statuses say when."""
        grace = timedelta(seconds=self.settings.retire_grace_s)
        statuses: dict[str, ModelStatus] = {}
        for name, since in sorted(self.snapshot.retired.items()):
            if name in self.desired:
                continue  # back in the catalog
            reps = sorted(
                (r for r in self.inv.by_model.get(name, []) if r.counts), key=lambda r: r.id
            )
            due = since + grace
            if reps and self.now >= due:
                for r in reps:
                    self.stop(r.id)
                    reason = f"retired: its key was deleted at {rfc3339(since)}"
                    self.stops.append(StopAction(replica=r.id, model=name, reason=reason))
            pending = None
            if reps and self.now < due:
                pending = f"retiring: its key was deleted; its replicas stop at {rfc3339(due)}"
            statuses[name] = ModelStatus(desired=0, live=len(reps), pending=pending)
        return statuses

    def scale_down(self) -> None:
        """First, for every model: scale-downs do not depend on placement, and preemption must
        not pick a replica that is stopped anyway (nor count it towards a minimum)."""
        for m in self.snapshot.models:
            want, have = self.desired[m.name], self.live[m.name]
            if have <= want:
                continue
            reps = sorted(
                (r for r in self.inv.by_model.get(m.name, []) if r.counts),
                key=lambda r: (r.created_at, r.id),
                reverse=True,
            )
            for r in reps[: have - want]:
                self.stop(r.id)
                reason = f"scale down: {have} live, {want} desired"
                self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def order_key(self, m: Model) -> OrderKey:
        """Models that place within their owner's guarantee go first, and among them those
        others are held for: that room is their owner's whatever the classes (they would take
        it back from a borrower anyway, rule 2). Else a higher class that only borrows takes
        it and is reclaimed from in turn, pass after pass, or starts and loses a replica at
        once. Only models that will place need the rest (the others keep their place)."""
        have = self.live[m.name]
        if have >= self.desired[m.name]:
            return True, True, (-CLASS_RANK[m.class_], have >= m.scaling.min, 0, 0.0, m.name)
        owed = within_guarantee(m, self.inv)
        key = _order_key(m, have, self.placer.reach(m, self.inv))
        return not owed, not (owed and m.name in self.claimants), key

    def grow(self, m: Model) -> tuple[str | None, list[ProfileTrial]]:
        """Place the model's missing replicas, or preempt for them: its pending sentence and
        what its profiles ran into."""
        if m.name in self.held:
            h = self.held[m.name]
            if self.now < h.until:
                return f"held until {rfc3339(h.until)} after yielding to {h.for_}", []
            return f"held one more pass after yielding to {h.for_}", []
        if m.name in self.giving_way:
            return f"held while its replicas preempted for {self.giving_way[m.name]} stop", []
        want, have = self.desired[m.name], self.live[m.name]
        if m.name in self.on_their_way:
            self.reserve(m, self.on_their_way[m.name], want - have)
            return "waiting for preempted replicas to stop", []
        placed = 0
        while have + placed < want:
            out = self.placer.place(m, self.inv)
            if out.placement is None:
                pending = "; ".join(out.notes)
                if self.preempt_for(m, want - have - placed, have + placed):
                    pending = "waiting for preempted replicas to stop"
                return pending, out.trials
            commit(m, out.placement, self.inv)
            placed += 1
            self.starts.append(
                StartAction(
                    model=m.name,
                    profile=out.placement.profile.name,
                    replica=_new_id(m.name, self.now.isoformat(), self.taken_ids),
                    shards=out.placement.shards,
                    reason=_start_reason(m, self.snapshot.demand.get(m.name), have + placed, want),
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
        trial = self.inv.clone()
        gone = False
        future: list[Placement] = []  # where the missing replicas will go
        for _ in range(missing):
            fitted = self.placer.place(m, trial, explain=False).placement
            if fitted is None:
                cands = self.pool.candidates(m, trial, live + len(future))
                chosen = choose(m, cands, trial, self.settings.max_victims, self.placer)
                if not chosen:
                    break
                for v in chosen:
                    self.stop(v.replica.id)
                    trial.release(v.replica.id)
                    self.stops.append(
                        StopAction(
                            replica=v.replica.id,
                            model=v.model.name,
                            reason=f"preempted for {m.name}",
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
        return gone

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
