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


def decide(snapshot: Snapshot, plugins: Plugins | None = None) -> Plan:
    extra = plugins or Plugins()
    placer = Placer(
        default_filters() + list(extra.filters),
        default_scorers() + list(extra.scorers),
        len(snapshot.nodes),
        extra=bool(extra.filters),
    )
    inv = Inventory.build(snapshot)
    now = snapshot.now
    now_s = now.isoformat()
    reps_by_model = inv.by_model
    grace = snapshot.settings.eviction_grace_s
    desired: dict[str, int] = {}
    live: dict[str, int] = {}
    for m in snapshot.models:
        reps = reps_by_model.get(m.name, [])
        desired[m.name] = desired_replicas(m, snapshot.demand.get(m.name), reps, now, grace)
        live[m.name] = inv.live_count.get(m.name, 0)
    taken_ids = set(inv.replicas)
    stops: list[StopAction] = []
    starts: list[StartAction] = []
    statuses: dict[str, ModelStatus] = {}
    settings = snapshot.settings
    # Replicas stopped for a model and still on their way out: it waits for them (rule 5),
    # and the model they belong to gives no more trouble until they are gone (rule 5: held).
    on_their_way: dict[str, list[str]] = {}  # preemptor -> its victims still stopping
    giving_way: dict[str, str] = {}  # victim model -> the model its stopping replica is for
    for r in snapshot.replicas:
        if r.preempted_for and not r.counts:
            on_their_way.setdefault(r.preempted_for, []).append(r.id)
            giving_way.setdefault(r.model, r.preempted_for)
    # A hold ends early once the model it was given to has what it asked for. Otherwise it is
    # kept while that model still waits for its victims, and honoured once more in the pass
    # after they are gone: the room goes to the model it was taken for even when
    # preempt_hold_s is shorter than a stop takes (or 0).
    held: dict[str, Hold] = {}  # honoured in this pass
    holds: dict[str, Hold] = {}  # handed on in the plan
    for name, h in sorted(snapshot.holds.items()):
        if h.for_ in desired and live[h.for_] < desired[h.for_]:
            held[name] = h
            if now < h.until or h.for_ in on_their_way:
                holds[name] = h
    until = now + timedelta(seconds=settings.preempt_hold_s)  # of holds made in this pass
    spoken_for: set[str] = set()  # replicas this pass already stops
    pool: VictimPool | None = None  # built on the first preemption attempt only

    def stop(replica_id: str) -> None:
        if pool is not None:
            pool.exclude(replica_id)
        else:
            spoken_for.add(replica_id)

    def reserve(m: Model, gone: list[str], missing: int) -> None:
        """Keep for `m` the free room it will need beside what `gone` frees, for the rest of
        the pass: placed in a trial, and whatever of that is free now is held back."""
        trial = inv.clone()
        for rid in gone:
            trial.release(rid)
        future: list[Placement] = []
        for _ in range(missing):
            fitted = placer.place(m, trial, explain=False).placement
            if fitted is None:
                break
            commit(m, fitted, trial)
            future.append(fitted)
        _hold_back(inv, future)

    # Scale-downs first: they do not depend on placement, and preemption must not pick a
    # replica that is stopped anyway (nor count it towards a minimum).
    for m in snapshot.models:
        want, have = desired[m.name], live[m.name]
        if have > want:
            reps = sorted(
                (r for r in reps_by_model.get(m.name, []) if r.counts),
                key=lambda r: (r.created_at, r.id),
                reverse=True,
            )
            for r in reps[: have - want]:
                stop(r.id)
                stops.append(
                    StopAction(
                        replica=r.id,
                        model=m.name,
                        reason=f"scale down: {have} live, {want} desired",
                    )
                )

    # Models that place within their owner's guarantee go first, and among them those others
    # are held for: that room is their owner's whatever the classes (they would take it back
    # from a borrower anyway, rule 2). Else a higher class that only borrows takes it, is
    # reclaimed from in turn, and so on pass after pass; or starts and loses a replica at once.
    quotas = {q.owner: q for q in snapshot.quotas}
    claimants = {h.for_ for h in held.values()}

    def order_key(m: Model) -> tuple[bool, bool, tuple[int, bool, int, float, str]]:
        # Only models that will place need reach and size (the others keep their place).
        have = live[m.name]
        if have >= desired[m.name]:
            return True, True, (-CLASS_RANK[m.class_], have >= m.scaling.min, 0, 0.0, m.name)
        owed = within_guarantee(m, inv, quotas)
        key = _order_key(m, have, placer.reach(m, inv))
        return not owed, not (owed and m.name in claimants), key

    for m in sorted(snapshot.models, key=order_key):
        want, have = desired[m.name], live[m.name]
        pending: str | None = None
        tried: list[ProfileTrial] = []
        if have < want:
            if m.name in held:
                h = held[m.name]
                if now < h.until:
                    pending = f"held until {rfc3339(h.until)} after yielding to {h.for_}"
                else:
                    pending = f"held one more pass after yielding to {h.for_}"
            elif m.name in giving_way:
                pending = f"held while its replicas preempted for {giving_way[m.name]} stop"
            elif m.name in on_their_way:
                pending = "waiting for preempted replicas to stop"
                reserve(m, on_their_way[m.name], want - have)
            else:
                placed = 0
                gone: list[str] = []  # victims chosen for this model in this pass
                while have + placed < want:
                    out = placer.place(m, inv)
                    if out.placement is not None:
                        commit(m, out.placement, inv)
                        placed += 1
                        starts.append(
                            StartAction(
                                model=m.name,
                                profile=out.placement.profile.name,
                                replica=_new_id(m.name, now_s, taken_ids),
                                shards=out.placement.shards,
                                reason=_start_reason(
                                    m, snapshot.demand.get(m.name), have + placed, want
                                ),
                            )
                        )
                        continue
                    pending = "; ".join(out.notes)
                    tried = out.trials
                    if settings.max_victims == 0:
                        break
                    if pool is None:
                        pool = VictimPool(snapshot, inv, spoken_for)
                    # Victims for every replica still missing, each set tried on the room the
                    # earlier ones leave (so the room is not preempted twice for two models).
                    trial = inv.clone()
                    missing = want - have - placed
                    future: list[Placement] = []  # where the missing replicas will go
                    for _ in range(missing):
                        fitted = placer.place(m, trial, explain=False).placement
                        if fitted is None:
                            cands = pool.candidates(m, trial, have + placed + len(future))
                            chosen = choose(m, cands, trial, settings.max_victims, placer)
                            if not chosen:
                                break
                            for v in chosen:
                                stop(v.replica.id)
                                gone.append(v.replica.id)
                                trial.release(v.replica.id)
                                stops.append(
                                    StopAction(
                                        replica=v.replica.id,
                                        model=v.model.name,
                                        reason=f"preempted for {m.name}",
                                        preempted_for=m.name,
                                    )
                                )
                                hold = Hold.model_validate({"until": until, "for": m.name})
                                holds[v.model.name] = held[v.model.name] = hold
                            fitted = placer.place(m, trial, explain=False).placement
                            if fitted is None:
                                break
                        commit(m, fitted, trial)
                        future.append(fitted)
                    if gone:
                        pending = "waiting for preempted replicas to stop"
                        _hold_back(inv, future)
                    break
        statuses[m.name] = ModelStatus(desired=want, live=have, pending=pending, tried=tried)
    stops.sort(key=lambda a: a.replica)
    plan = Plan(
        actions=[*stops, *starts],
        models=dict(sorted(statuses.items())),
        holds=holds,
    )
    # Pending MIG demand a drained MIG GPU could serve if re-partitioned: advice, never an action.
    return plan.model_copy(update={"advice": mig_advice(snapshot, plan)})
