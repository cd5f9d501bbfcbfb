"""One pass: snapshot in, plan out. `decide()` runs the steps below in order over one
PassState (pass_state.py); each step is a function of it, in the module named beside it."""

from __future__ import annotations

from scheduler.core.defragment import defragment
from scheduler.core.growth import turn_order
from scheduler.core.lifecycle import consolidate
from scheduler.core.mig_advice import mig_advice
from scheduler.core.models import Model, ModelStatus, OwnerUsage, Plan, Snapshot
from scheduler.core.pass_state import PassState, PendingWhy
from scheduler.core.plugins import Plugins
from scheduler.core.prefetch import prefetch
from scheduler.core.retirement import (
    name_stale,
    replace_stale,
    retire,
    retire_deleted,
    scale_down,
)
from scheduler.core.sharing import take_turns
from scheduler.core.usage import carried, held_by_owner


def decide(snapshot: Snapshot, plugins: Plugins | None = None) -> Plan:
    st = PassState(snapshot, plugins or Plugins())
    counted = dict(st.counts.live)  # the status reports replicas that count, retired or not
    deleted = retire_deleted(st)  # 1. models whose key was deleted (retirement.py)
    retire(st)  # 2. roll-outs, load-grace time-outs, drains (retirement.py, lifecycle.py)
    scale_down(st)  # 3. more live than desired (retirement.py)
    kept = replace_stale(st)  # 4. replicas of removed profiles, once replaced (retirement.py)
    order = short_models(st)
    take_turns(st, order)  # 5. grow: guarantees first, then shared fairly (sharing.py)
    # Short of room (not held, not waiting for victims), in turn order.
    waiting = [m for m in order if m.name in st.turns.outcome and st.turns.outcome[m.name][1]]
    statuses = model_statuses(st, counted, deleted)
    name_stale(statuses, kept)  # what replicas of removed profiles still hold
    consolidate(st)  # 6. better placements on the free room every model left (lifecycle.py)
    defragment(st, waiting)  # 7. free a node whole for a waiting model (defragment.py)
    plan = plan_of(st, statuses)
    prefetches, prefetching = prefetch(st)  # 8. weights ahead of demand (prefetch.py)
    if prefetches or prefetching:
        plan = plan.model_copy(update={"prefetches": prefetches, "prefetch": prefetching})
    return plan


def short_models(st: PassState) -> list[Model]:
    """The models short of their target, in the order they take turns (the others' order
    never matters)."""
    live, target = st.counts.live, st.counts.target
    short = [m for m in st.snapshot.models if live[(n := m.name)] < target[n]]
    return sorted(short, key=lambda m: turn_order(st, m))


def model_statuses(
    st: PassState, counted: dict[str, int], deleted: dict[str, ModelStatus]
) -> dict[str, ModelStatus]:
    """Every model's status once the models had their turns. Statuses are frozen, and most
    models share theirs with others ("1 replica: minimum 1"): one object per distinct status
    (without trials) spares validating and holding each again."""
    statuses = deleted
    made: dict[tuple[int, int, PendingWhy | None, str, int], ModelStatus] = {}
    outcome, timed_out = st.turns.outcome, st.ledger.timed_out
    for m in st.snapshot.models:
        name = m.name
        pending, tried = outcome.get(name, (None, []))
        w = st.counts.wants[name]
        key = (st.counts.desired[name], counted[name], pending, w.why, w.recommended)
        status = None if tried else made.get(key)
        if status is None:
            status = ModelStatus(
                desired=key[0],
                live=key[1],
                pending=pending[1] if pending is not None else None,
                pending_code=pending[0] if pending is not None else None,
                tried=tried,
                why=w.why,
                recommended=w.recommended,
            )
            if not tried:
                made[key] = status
        if name in timed_out:
            status = status.model_copy(update={"timed_out": timed_out[name]})
        statuses[name] = status
    return statuses


def plan_of(st: PassState, statuses: dict[str, ModelStatus]) -> Plan:
    ledger = st.ledger
    for name, progress in ledger.rollout.items():
        statuses[name] = statuses[name].model_copy(update={"rollout": progress})
    ledger.stops.sort(key=lambda a: a.replica)
    kept = st.reservations.handed_on()
    for name, said in st.reservations.said.items():
        if name in statuses:
            statuses[name] = statuses[name].model_copy(update={"reserved": said})
    plan = Plan(
        actions=[*ledger.stops, *ledger.starts],
        models=dict(sorted(statuses.items())),
        holds=st.holds.handed_on,
        reservations=kept,
        stalled=dict(sorted(ledger.stalled.items())),
        moves=dict(sorted(ledger.moves.items())),
        usage=usage_after(st),
    )
    # Pending MIG demand a drained MIG GPU could serve if re-partitioned: advice only.
    return plan.model_copy(update={"advice": mig_advice(st.snapshot, plan)})


def usage_after(st: PassState) -> dict[str, OwnerUsage]:
    """Each owner's decayed usage to hand on (rule F4; empty when off). Without quotas nobody
    is accounted, and what was carried only decays."""
    if st.settings.usage_half_life_s <= 0:
        return {}
    fair = st.turns.fair
    held = held_by_owner(st.inv.facts.live, fair.node_of) if fair is not None else {}
    return carried(st.snapshot, held)
