"""One pass: snapshot in, plan out (scaling, scale-down, placement, preemption)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from scheduler.core.inventory import Inventory, Shape, profile_need
from scheduler.core.lifecycle import budget, outdated, profile_rank, serving_gpus, spot
from scheduler.core.mig_advice import mig_advice
from scheduler.core.models import (
    CLASS_RANK,
    Demand,
    Hold,
    Model,
    ModelStatus,
    Node,
    Plan,
    Profile,
    ProfileTrial,
    Replica,
    Snapshot,
    StartAction,
    StopAction,
    rfc3339,
)
from scheduler.core.placement import Placement, Placer, commit
from scheduler.core.plugins import Plugins, default_filters, default_scorers
from scheduler.core.preemption import VictimPool, choose, within_guarantee
from scheduler.core.scaling import desired_replicas

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
DRAIN = (
    "its node is draining and it is not serving yet",
    "its node is draining; replaced elsewhere",
)
ROLL = (
    "rolling update: not serving yet, restarted on the model's new spec",
    "rolling update: replaced by a replica on the model's new spec",
)
MOVE = (
    "consolidation: not serving yet",
    "consolidation: replaced by a replica on a better placement",
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
            settings=self.settings,
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
        self.retired: set[str] = set()  # timed out, or on a draining node: not live any more
        self.timed_out: dict[str, int] = {}  # model -> replicas stopped past their load grace
        self.pool: VictimPool | None = None  # built on the first preemption attempt only
        self.claimants = {h.for_ for h in self.held.values()}
        self.rollout: dict[str, str] = {}  # model -> progress of its replacements
        self.rolling: set[str] = set()  # models with replicas replaced by a rolling update
        self.stalled: dict[str, str] = {}  # model -> spec digest whose roll-out failed
        self.ranks: dict[str, float] = {}  # replica -> how good its placement is (lower: better)
        self.moves: dict[str, str] = {}  # replica -> its replacement, moves under way
        self.steady: dict[str, bool] = {}  # model -> may its replicas be moved (defragment)

    # ------------------------------------------------------------ the pass

    def run(self) -> Plan:
        counted = dict(self.live)  # the status reports replicas that count, retired or not
        self.retire()
        self.scale_down()
        statuses: dict[str, ModelStatus] = {}
        waiting: list[Model] = []
        for m in sorted(self.snapshot.models, key=self.order_key):
            want, have = self.desired[m.name], self.live[m.name]
            pending, tried = self.grow(m) if have < want else (None, [])
            if pending is not None and tried:
                waiting.append(m)  # short of room (not held, not waiting for victims)
            statuses[m.name] = ModelStatus(
                desired=want, live=counted[m.name], pending=pending, tried=tried
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
            reps = self.inv.by_model.get(m.name, [])
            self.renew(m, reps)
            if not draining and all(r.state != "starting" for r in reps):
                continue  # the common case: nothing to look at
            counting = sorted(
                (r for r in reps if r.counts),
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

    # ------------------------------------------------------------ rolling update, consolidation

    def stall(self, m: Model, r: Replica) -> None:
        """A replica on the current spec that did not become ready, while older ones still run:
        the roll-out stops there (the old replicas are kept) until the spec changes again."""
        specs = self.snapshot.specs.get(m.name) or {}
        if not r.spec or specs.get(r.profile) != r.spec:
            return
        reps = [x for x in self.inv.by_model.get(m.name, []) if x.counts]
        if outdated(m, reps, specs):
            self.stalled[m.name] = r.spec
            self.rollout[m.name] = (
                f"roll-out stopped: replica {r.id} on the new spec did not become ready "
                f"within {m.load_grace_s}s; the previous replicas are kept"
            )

    def renew(self, m: Model, reps: list[Replica]) -> None:
        """Rolling update, and moves to a better placement whose replacement already runs or
        starts. At most settings.rollout_surge replacements start at a time beside the fresh
        replicas still starting; never below the desired count live (make-before-break)."""
        counting = [r for r in reps if r.counts and r.id not in self.retired]
        if not counting:
            return
        ids = {r.id for r in counting}
        moving = [r for r in counting if self.snapshot.moves.get(r.id) in ids]
        if moving:
            # Moves under way (their replacements still count): each goes once it is covered.
            for r in moving:
                self.moves[r.id] = self.snapshot.moves[r.id]
            self.mark(m, moving)
            self.replace(m, moving, counting, MOVE)
            self.rollout[m.name] = f"moving {len(moving)} replica(s) to a better placement"
            return
        specs = self.snapshot.specs.get(m.name)
        old = outdated(m, counting, specs)
        failed = self.snapshot.stalled.get(m.name)
        if failed is not None and specs and failed in specs.values():
            self.stalled[m.name] = failed
            # Its failed replacements beyond the desired count go, not the old replicas.
            extra = len(counting) - self.desired[m.name]
            for r in sorted(counting, key=lambda r: (r.created_at, r.id), reverse=True):
                if extra > 0 and r.state == "starting" and r.spec == failed:
                    extra -= 1
                    self.retire_one(r, m, "roll-out stopped: its replacement did not start")
                    self.live[m.name] -= 1
            if old:
                self.rollout[m.name] = (
                    f"roll-out stopped: a replica on the new spec did not become ready; "
                    f"{len(old)} kept on the previous spec (change the model to retry)"
                )
            return
        want = self.desired[m.name]
        if old:
            fresh_starting = sum(1 for r in counting if r.state == "starting" and r not in old)
            n = budget(len(counting), want, self.settings.rollout_surge, fresh_starting, len(old))
            movers = old[:n]
            if movers:
                self.rolling.add(m.name)
            self.mark(m, movers)
            self.replace(m, movers, counting, ROLL)
            done = len(counting) - len(old)
            self.rollout[m.name] = (
                f"rolling update: {done} on the new spec, {len(old)} on the previous, "
                f"{len(movers)} being replaced"
            )
            return
        # A better placement already running or starting beside a worse one (a move under
        # way, or a scale-down): the worse one goes first, and only once the rest cover.
        extra = len(counting) - want
        if extra <= 0:
            return
        ranked = sorted(counting, key=lambda r: (self.rank(m, r), r.created_at, r.id))
        best = self.rank(m, ranked[0])
        worse = [r for r in reversed(ranked) if r.state == "running" and self.rank(m, r) > best]
        movers = worse[:extra]
        if movers:
            self.mark(m, movers)
            self.replace(m, movers, counting, MOVE)
            self.rollout[m.name] = f"moving {len(movers)} replica(s) to a better profile"

    def rank(self, m: Model, r: Replica) -> float:
        """How good a replica's placement is for its model: its profile's place in the list,
        or for `placement: cheapest` what its devices cost (lower is better)."""
        found = self.ranks.get(r.id)
        if found is None:
            if m.placement == "cheapest":
                found = self.placer.costs.of(r.shards, self._node)
            else:
                found = float(profile_rank(m, r.profile))
            self.ranks[r.id] = found
        return found

    def _node(self, node_id: str) -> Node | None:
        ns = self.inv.nodes.get(node_id)
        return ns.node if ns is not None else None

    def consolidate(self) -> None:
        """Start a better-placed replacement for a replica on a worse profile (or a dearer
        placement), on free room only and after every model had its turn; at most
        settings.consolidate_per_pass a pass. Never churning: only a strictly better
        placement, never by preemption, only replicas ready for min_lifetime_s, and not for a
        model that is held, rolling, or has anything starting."""
        left = self.settings.consolidate_per_pass
        if left == 0:
            return
        settle = timedelta(seconds=self.settings.min_lifetime_s)
        tries = 4 * left  # placement trials are not free: a bounded few per pass
        stopped = {a.model for a in self.stops}
        for m in self.snapshot.models:
            if left == 0 or tries == 0:
                break
            every = self.inv.by_model.get(m.name, [])
            if m.placement != "cheapest":
                first = m.profiles[0].name
                if all(r.profile == first for r in every):
                    continue  # the common case: all on the preferred profile
            if m.name in self.held or m.name in self.giving_way or m.name in self.rollout:
                continue
            reps = [r for r in every if r.counts]
            if any(r.id in self.retired or r.state != "running" for r in reps):
                continue
            if len(reps) != self.desired[m.name] or m.name in stopped:
                continue
            settled = [r for r in reps if r.ready_at and r.ready_at + settle <= self.now]
            worst = sorted(settled, key=lambda r: (-self.rank(m, r), r.created_at, r.id))
            if worst and (self.rank(m, worst[0]) > 0 or m.placement == "cheapest"):
                tries -= 1
                if self.move(m, worst[0]):
                    left -= 1

    def move(self, m: Model, r: Replica) -> bool:
        """Place a replacement for `r` on a strictly better placement, if one fits now."""
        here = self.rank(m, r)
        if m.placement == "cheapest":
            better = m
        else:
            ahead = m.profiles[: int(min(here, len(m.profiles)))]
            better = m.model_copy(update={"profiles": ahead})
        if not better.profiles:
            return False
        fitted = self.placer.place(better, self.inv, explain=False).placement
        if fitted is None:
            return False
        if m.placement == "cheapest" and self.placer.cost(fitted, self.inv) >= here:
            return False
        self.start_move(m, r, fitted, f"consolidate: replaces {r.id} (profile {r.profile})")
        self.rollout[m.name] = f"moving {r.id} from profile {r.profile} to {fitted.profile.name}"
        return True

    def start_move(self, m: Model, r: Replica, fitted: Placement, reason: str) -> None:
        commit(m, fitted, self.inv)
        self.retired.add(r.id)
        rid = _new_id(m.name, self.now.isoformat(), self.taken_ids)
        self.moves[r.id] = rid
        self.starts.append(
            StartAction(
                model=m.name,
                profile=fitted.profile.name,
                replica=rid,
                shards=fitted.shards,
                reason=reason,
            )
        )

    def movable(self, r: Replica) -> Model | None:
        """The model of a replica that may be moved elsewhere (make-before-break) to make room:
        running and settled on one node, of a model that has exactly what it wants, all of it
        running, and that is neither held nor being changed."""
        settle = timedelta(seconds=self.settings.min_lifetime_s)
        if (
            r.state != "running"
            or len(r.shards) != 1
            or r.id in self.retired
            or r.id in self.spoken_for
            or r.ready_at is None
            or r.ready_at + settle > self.now
        ):
            return None
        if r.model not in self.steady:
            self.steady[r.model] = self.is_steady(r.model)
        return self.inv.models[r.model] if self.steady[r.model] else None

    def is_steady(self, name: str) -> bool:
        m = self.inv.models.get(name)
        if m is None or name in self.held or name in self.giving_way or name in self.rollout:
            return False
        reps = [x for x in self.inv.by_model.get(name, []) if x.counts]
        return len(reps) == self.desired[name] and all(
            x.state == "running" and x.id not in self.retired for x in reps
        )

    def defragment(self, waiting: list[Model]) -> None:
        """A model short of room whose replica needs several GPUs of one node: where a node is
        free but for a few small replicas, move those elsewhere (replacements first, on free
        room), so the node frees whole. Shares consolidate_per_pass; a bounded few tries."""
        left = self.settings.consolidate_per_pass - sum(
            1 for a in self.starts if a.reason.startswith("consolidate")
        )
        if left <= 0 or not waiting:
            return
        # One model a pass (scanning the fleet is not free), a different one each second.
        turn = int(self.now.timestamp()) % len(waiting)
        tries = 1
        for m in waiting[turn:] + waiting[:turn]:
            if left <= 0 or tries == 0:
                return
            p = m.profiles[0]
            if p.is_mig or p.shards != 1 or p.gpus < 2 or m.name in self.on_their_way:
                continue
            if any(a.preempted_for == m.name for a in self.stops):
                continue  # it preempts for its room instead
            tries -= 1
            if self.make_room(m, p):
                left -= 1

    def make_room(self, m: Model, p: Profile) -> bool:
        on_node: dict[str, list[Replica]] = {}
        for r in self.inv.replicas.values():
            if r.counts and len(r.shards) == 1:
                on_node.setdefault(r.shards[0].node, []).append(r)
        kinds_of: dict[Shape, frozenset[tuple[str, float]]] = {}  # GPU kinds p may use
        best: tuple[int, str, list[tuple[Replica, Model]]] | None = None
        for nid, here in on_node.items():
            ns = self.inv.nodes.get(nid)
            if ns is None or not ns.node.eligible or ns.node.draining:
                continue
            if len(ns.free_gpus) + sum(len(r.shards[0].gpus) for r in here) < p.gpus:
                continue  # cheap bound first: not enough even if everything moved
            kinds = kinds_of.get(ns.shape)
            if kinds is None:
                usable = serving_gpus(ns, p, [g.id for g in ns.node.gpus])
                ok = {(g.model, g.memory_gb) for g in ns.node.gpus if g.id in usable}
                kinds = kinds_of[ns.shape] = frozenset(ok if len(usable) >= p.gpus else ())
            if not kinds:
                continue
            free = sum(1 for g in ns.free_gpus if (g.model, g.memory_gb) in kinds)
            if free >= p.gpus:
                continue
            victims: list[tuple[Replica, Model]] = []
            for r in sorted(here, key=lambda r: (-len(r.shards[0].gpus), r.id)):
                vm = self.movable(r)
                if vm is None or vm.name == m.name:
                    continue
                victims.append((r, vm))
                free += len(serving_gpus(ns, p, r.shards[0].gpus))
                if free >= p.gpus:
                    break
            if free >= p.gpus and (best is None or len(victims) < best[0]):
                best = (len(victims), nid, victims)
                if len(victims) == 1:
                    break  # cannot do with fewer
        if best is None:
            return False
        _, nid, victims = best
        trial = self.inv.clone()
        for r, _vm in victims:
            trial.release(r.id)
        room = spot(trial.nodes[nid], p)
        if room is None:
            return False
        trial.take(m, p, nid, room)  # the spot is the waiting model's: the others go elsewhere
        moved: list[tuple[Replica, Model, Placement]] = []
        for r, vm in victims:
            own = vm.profile(r.profile)
            if own is None:
                return False
            fitted = self.placer.place(
                vm.model_copy(update={"profiles": [own]}), trial, explain=False
            ).placement
            if fitted is None:
                return False
            commit(vm, fitted, trial)
            moved.append((r, vm, fitted))
        for r, vm, fitted in moved:
            why = f"consolidate: moves {r.id} off {nid} so that {m.name} fits there whole"
            self.start_move(vm, r, fitted, why)
            self.rollout[vm.name] = f"moving {r.id} off {nid} to make room for {m.name}"
        free_now = [d for d in room if self.inv.is_free(nid, d)]
        if free_now:
            self.inv.reserve(nid, free_now)  # kept for the waiting model
        return True

    def retire_one(self, r: Replica, m: Model, reason: str) -> None:
        self.stop(r.id)
        self.retired.add(r.id)
        self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

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
                    for r in self.inv.by_model.get(m.name, [])
                    if r.counts and r.id not in self.retired
                ),
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
                    reason=_start_reason(m, self.snapshot.demand.get(m.name), have + placed, want)
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
