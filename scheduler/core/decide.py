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
from scheduler.core.placement import Placer, commit
from scheduler.core.plugins import Plugins, default_filters, default_scorers
from scheduler.core.preemption import VictimPool, choose
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
    holds: dict[str, Hold] = {}
    for name, h in sorted(snapshot.holds.items()):
        if now < h.until and h.for_ in desired and live[h.for_] < desired[h.for_]:
            holds[name] = h
    taken_ids = set(inv.replicas)
    stops: list[StopAction] = []
    starts: list[StartAction] = []
    statuses: dict[str, ModelStatus] = {}
    settings = snapshot.settings
    # Replicas stopped for a model and still on their way out: it waits for them (rule 5).
    awaiting = inv.stopping_for
    spoken_for: set[str] = set()  # replicas this pass already stops
    pool: VictimPool | None = None  # built on the first preemption attempt only

    def stop(replica_id: str) -> None:
        if pool is not None:
            pool.exclude(replica_id)
        else:
            spoken_for.add(replica_id)

    def order_key(m: Model) -> tuple[int, bool, int, float, str]:
        # Only models that will place need reach and size (the others keep their place).
        have = live[m.name]
        if have >= desired[m.name]:
            return (-CLASS_RANK[m.class_], have >= m.scaling.min, 0, 0.0, m.name)
        return _order_key(m, have, placer.reach(m, inv))

    for m in sorted(snapshot.models, key=order_key):
        want, have = desired[m.name], live[m.name]
        pending: str | None = None
        tried: list[ProfileTrial] = []
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
        elif have < want:
            if m.name in holds:
                h = holds[m.name]
                pending = f"held until {rfc3339(h.until)} after yielding to {h.for_}"
            elif m.name in awaiting:
                pending = "waiting for preempted replicas to stop"
            else:
                placed = 0
                while have + placed < want:
                    out = placer.place(m, inv)
                    if out.placement is None:
                        pending = "; ".join(out.notes)
                        tried = out.trials
                        if settings.max_victims == 0:
                            break
                        if pool is None:
                            pool = VictimPool(snapshot, inv, spoken_for)
                        cands = pool.candidates(m, inv, live[m.name])
                        chosen = choose(m, cands, inv, settings.max_victims, placer)
                        for v in chosen:
                            stop(v.replica.id)
                            stops.append(
                                StopAction(
                                    replica=v.replica.id,
                                    model=v.model.name,
                                    reason=f"preempted for {m.name}",
                                    preempted_for=m.name,
                                )
                            )
                            holds[v.model.name] = Hold.model_validate(
                                {
                                    "until": now + timedelta(seconds=settings.preempt_hold_s),
                                    "for": m.name,
                                }
                            )
                        if chosen:
                            pending = "waiting for preempted replicas to stop"
                        break
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
        statuses[m.name] = ModelStatus(desired=want, live=have, pending=pending, tried=tried)
    stops.sort(key=lambda a: a.replica)
    plan = Plan(
        actions=[*stops, *starts],
        models=dict(sorted(statuses.items())),
        holds=holds,
    )
    # Pending MIG demand a drained MIG GPU could serve if re-partitioned: advice, never an action.
    return plan.model_copy(update={"advice": mig_advice(snapshot, plan)})
