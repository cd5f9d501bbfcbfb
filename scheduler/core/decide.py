"""One pass: snapshot in, plan out (scaling, scale-down, placement, preemption)."""

from __future__ import annotations

import hashlib
import heapq
from datetime import timedelta

from scheduler.core.fairshare import FairShare
from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.lifecycle import Lifecycle
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
    owed_replicas,
    stop_reason,
    within_guarantee,
)
from scheduler.core.scaling import Want, want

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
DRAIN = (
    "its node is draining and it is not serving yet",
    "its node is draining; replaced elsewhere",
)

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


class _Pass(Lifecycle):
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
            reps = inv.facts.by_model.get(m.name, [])
            old = [r for r in reps if r.counts and m.profile(r.profile) is None]
            w = want(
                m,
                snapshot.demand.get(m.name),
                snapshot.load.get(m.name),
                [r for r in reps if r not in old] if old else reps,  # what counts as live
                snapshot.recent_desired.get(m.name, []),
                self.now,
                self.settings,
            )
            self.wants[m.name] = w
            self.desired[m.name] = w.count
            # What placement grows to: the count the signals ask. The scale-down window only
            # keeps replicas (desired can be above it); it never starts one, also not when a
            # replica being replaced stops counting later in the pass.
            self.target[m.name] = min(w.count, w.recommended)
            if old:
                self.stale[m.name] = old
            self.live[m.name] = inv.facts.live_count.get(m.name, 0) - len(old)
        self.taken_ids = set(inv.facts.replicas)
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
        self.keys: dict[str, tuple[int, bool, int, float, str]] = {}  # order keys, by model
        self.placed: dict[str, int] = {}  # replicas placed this pass, by model
        # A model that has had its say: its pending sentence and what its profiles ran into.
        self.outcome: dict[str, tuple[str | None, list[ProfileTrial]]] = {}
        self.fair: FairShare  # set when quotas are in play
        self.owing = False  # in the guarantee phase
        self.needs: dict[str, tuple[float, float, float]] = {}  # first profile's, by model
        self.held_back: dict[str, str] = {}  # why room that could be made was not
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
        order = sorted(self.snapshot.models, key=self.order_key)
        if self.inv.facts.quotas:
            self.fair = FairShare(self.snapshot, self.inv)
            self.guarantees_first(order)
            self.share_the_rest(order)
        else:
            for m in order:
                self.turn(m, None)
        waiting: list[Model] = []
        for m in order:
            pending, tried = self.outcome.get(m.name, (None, []))
            if pending is not None and tried:
                waiting.append(m)  # short of room (not held, not waiting for victims)
            w = self.wants[m.name]
            statuses[m.name] = ModelStatus(
                desired=self.desired[m.name],
                live=counted[m.name],
                pending=pending,
                tried=tried,
                why=w.why,
                recommended=w.recommended,
            )
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

    def retire(self) -> None:
        """Replicas that go whatever the demand. One still starting past its model's
        load_grace_s is stopped. One on a draining node no longer counts as live, so the model
        grows a replacement elsewhere (where room allows) while it still serves; it is stopped
        once it is not serving, or once enough replicas elsewhere run (make-before-break)."""
        draining = {n.id for n in self.snapshot.nodes if n.draining}
        for m in self.snapshot.models:
            reps = self.inv.facts.by_model.get(m.name, [])
            self.renew(m, reps)
            if not draining and all(r.state != "starting" for r in reps):
                continue  # the common case: nothing to look at
            # A replica of a removed profile is not counted already; replace_stale sees to it.
            counting = sorted(
                (r for r in reps if r.counts and m.profile(r.profile) is not None),
                key=lambda r: (r.created_at, r.id),
            )
            movers: list[Replica] = []
            for r in counting:
                if r.id in self.retired:
                    continue  # already being replaced (rolling update)
                age = int((self.now - r.created_at).total_seconds())
                if r.state == "starting" and age > m.load_grace_s:
                    # Still counted in this pass (its room is not free yet): replaced once it
                    # is stopping, not alongside it.
                    reason = (
                        f"still starting after {age}s, past its load grace of {m.load_grace_s}s"
                    )
                    self.retire_one(r, m, reason)
                    self.timed_out[m.name] = self.timed_out.get(m.name, 0) + 1
                    self.stall(m, r)
                elif draining and any(sh.node in draining for sh in r.shards):
                    movers.append(r)
                    self.retired.add(r.id)
                    self.live[m.name] -= 1
            if movers:
                self.replace(m, movers, counting, DRAIN)

    def replace(
        self, m: Model, movers: list[Replica], counting: list[Replica], why: tuple[str, str]
    ) -> None:
        """Make-before-break, for drains, rolling updates and consolidation alike: `movers`
        (already not live) are stopped at once when not serving, and otherwise only once
        enough replicas elsewhere run to cover the model's desired count."""
        serving = [r for r in movers if r.state == "running"]
        running_elsewhere = sum(
            1 for r in counting if r.state == "running" and r.id not in self.retired
        )
        spare = running_elsewhere + len(serving) - self.desired[m.name]
        for r in movers:
            if r.state != "running":
                self.retire_one(r, m, why[0])
            elif spare > 0:
                spare -= 1
                self.retire_one(r, m, why[1])

    def mark(self, m: Model, movers: list[Replica]) -> None:
        """No longer live: the model grows their replacements in this pass."""
        for r in movers:
            self.retired.add(r.id)
            self.live[m.name] -= 1

    def new_id(self, model: str) -> str:
        return _new_id(model, self.now.isoformat(), self.taken_ids)

    def retire_one(self, r: Replica, m: Model, reason: str) -> None:
        self.stop(r.id)
        self.retired.add(r.id)
        self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def retire_deleted(self) -> dict[str, ModelStatus]:
        """Stop the replicas of models whose key was deleted, once the grace has passed (a key
        deleted by mistake can be put back in time); their statuses say when."""
        grace = timedelta(seconds=self.settings.retire_grace_s)
        statuses: dict[str, ModelStatus] = {}
        for name, since in sorted(self.snapshot.retired.items()):
            if name in self.desired:
                continue  # back in the catalog
            reps = sorted(
                (r for r in self.inv.facts.by_model.get(name, []) if r.counts), key=lambda r: r.id
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
            want = self.desired[m.name]
            have = self.live[m.name] - self.timed_out.get(m.name, 0)
            if have <= want:
                continue
            reps = sorted(
                (
                    r
                    for r in self.inv.facts.by_model.get(m.name, [])
                    if r.counts and r.id not in self.retired and m.profile(r.profile) is not None
                ),
                key=lambda r: (r.created_at, r.id),
                reverse=True,
            )
            for r in reps[: have - want]:
                self.stop(r.id)
                reason = f"scale down: {have} live, {self.wants[m.name].why}"
                self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def replace_stale(self) -> None:
        """Make before break: a replica of a removed profile stops once enough replicas of
        current profiles run (or the model wants none)."""
        for m in self.snapshot.models:
            old = self.stale.get(m.name)
            if not old:
                continue
            want = self.desired[m.name]
            running = sum(
                1
                for r in self.inv.facts.by_model.get(m.name, [])
                if r.state == "running"
                and m.profile(r.profile) is not None
                and r.id not in self.spoken_for
                and (self.pool is None or r.id not in self.pool.excluded)
            )
            if want > 0 and running < want:
                continue
            for r in old:
                self.stop(r.id)
                reason = f"replaced: profile {r.profile} is no longer in the model"
                self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def order_key(self, m: Model) -> OrderKey:
        """Models that place within their owner's guarantee go first, and among them those
        others are held for: that room is their owner's whatever the classes (they would take
        it back from a borrower anyway, rule R2). Else a higher class that only borrows takes
        it and is reclaimed from in turn, pass after pass, or starts and loses a replica at
        once. Only models that will place need the rest (the others keep their place)."""
        have = self.live[m.name]
        if have >= self.target[m.name]:
            return True, True, (-CLASS_RANK[m.class_], have >= m.scaling.min, 0, 0.0, m.name)
        owed = within_guarantee(m, self.inv)
        key = self.keys[m.name] = _order_key(m, have, self.placer.reach(m, self.inv))
        return not owed, not (owed and m.name in self.claimants), key

    # ------------------------------------------------------------ fair sharing

    def turn(self, m: Model, cap: int | None) -> None:
        """Let the model place up to `cap` more replicas (all it misses: None). Once it could
        not place one (pending, waiting, held) it has had its say for the pass."""
        if m.name in self.outcome or self.missing(m) <= 0:
            return
        pending, tried = self.grow(m, cap)
        if pending is not None:
            self.outcome[m.name] = (pending, tried)

    def missing(self, m: Model) -> int:
        return self.target[m.name] - self.live[m.name] - self.placed.get(m.name, 0)

    def guarantees_first(self, order: list[Model]) -> None:
        """Every owner below its guarantee is served up to it before anyone borrows: each
        model places (or reclaims) only the replicas that keep its owner within."""
        self.owing = True
        for m in order:
            most = self.missing(m)
            if most > 0 and m.name not in self.outcome:
                cap = owed_replicas(m, self.inv, most)
                if cap > 0:
                    self.turn(m, cap)
        self.owing = False

    def share_key(self, m: Model) -> tuple[int, bool, float, tuple[int, bool, int, float, str]]:
        """Higher classes first and models below their minimum, as always; then the owner
        with the least weighted dominant share once this replica is placed (fair sharing)."""
        have = self.live[m.name] + self.placed.get(m.name, 0)
        need = self.needs.get(m.name)
        if need is None:
            need = self.needs[m.name] = profile_need(m.profiles[0])
        share = self.fair.share(m.owner, self.inv, need)
        return -CLASS_RANK[m.class_], have >= m.scaling.min, share, self.keys[m.name]

    def share_the_rest(self, order: list[Model]) -> None:
        """What is past the guarantees, one replica at a time to the model whose owner has the
        least share. Shares only grow in this phase, so a stale key is re-checked on pop."""
        heap = [(self.share_key(m), i, m) for i, m in enumerate(order) if self.missing(m) > 0]
        heapq.heapify(heap)
        while heap:
            key, i, m = heapq.heappop(heap)
            if m.name in self.outcome or self.missing(m) <= 0:
                continue
            fresh = self.share_key(m)
            if fresh != key and heap and fresh > heap[0][0]:
                heapq.heappush(heap, (fresh, i, m))
                continue
            self.turn(m, 1)
            if m.name not in self.outcome and self.missing(m) > 0:
                heapq.heappush(heap, (self.share_key(m), i, m))

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
                    replica=_new_id(m.name, self.now.isoformat(), self.taken_ids),
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
