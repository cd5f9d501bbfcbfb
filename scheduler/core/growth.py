"""One model's turn to grow: place its missing replicas, or preempt for them (rules R1-R6),
or say why it waits (held, waiting for its victims, no room)."""

from __future__ import annotations

from scheduler.core.held_back import HeldBack
from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.models import Model, ProfileTrial, rfc3339
from scheduler.core.pass_state import PassState, PendingWhy, StartWhy
from scheduler.core.placement import Placement, commit
from scheduler.core.preemption import (
    VictimPool,
    choose,
    stop_code,
    stop_reason,
    within_guarantee,
)
from scheduler.core.turn_order import TurnOrder, model_order

WAITING: PendingWhy = ("waiting_for_victims", "waiting for preempted replicas to stop")
ROLLING_START: StartWhy = ("rolling_update", "rolling update: a replica on the model's new spec")

Outcome = tuple[PendingWhy | None, list[ProfileTrial]]  # why pending (None: placed), trials


def turn_order(st: PassState, m: Model) -> TurnOrder:
    """Models that place within their owner's guarantee go first, and among them those others
    are held for: that room is their owner's whatever the classes (they would take it back
    from a borrower anyway, rule R2). Else a higher class that only borrows takes it and is
    reclaimed from in turn, pass after pass, or starts and loses a replica at once. Asked
    only of models short of their target."""
    owed = within_guarantee(m, st.inv)
    reach = st.placer.reach(m, st.inv)
    key = st.turns.keys[m.name] = model_order(m, st.counts.live[m.name], reach)
    return TurnOrder(not owed, not (owed and m.name in st.holds.claimants), key)


def _waits(st: PassState, m: Model) -> PendingWhy | None:
    """Why the model does not grow in this pass at all (held, or waiting for its victims)."""
    h = st.holds.honoured.get(m.name)
    if h is not None:
        if st.now < h.until:
            return "held", f"held until {rfc3339(h.until)} after yielding to {h.for_}"
        return "held", f"held one more pass after yielding to {h.for_}"
    if m.name in st.holds.giving_way:
        return "held", f"held while its replicas preempted for {st.holds.giving_way[m.name]} stop"
    gone = st.holds.on_their_way.get(m.name)
    if gone is not None:
        reserve(st, m, gone, st.counts.target[m.name] - st.counts.live[m.name])
        return WAITING
    return None


def grow(st: PassState, m: Model, cap: int | None = None) -> Outcome:
    """Place up to `cap` of the model's missing replicas, or preempt for them: its pending
    sentence (None: placed them) and what its profiles ran into."""
    waits = _waits(st, m)
    if waits is not None:
        return waits, []
    counts = st.counts
    want, have = counts.target[m.name], counts.live[m.name]
    placed = counts.placed.get(m.name, 0)
    turn = 0
    while have + placed < want and (cap is None or turn < cap):
        out = st.placer.place(m, st.inv)
        if out.placement is None:
            # In the guarantee phase only what is owed may be reclaimed.
            ask = cap - turn if st.turns.owing and cap is not None else want - have - placed
            if preempt_for(st, m, ask, have + placed):
                return WAITING, out.trials
            return _short_of_room(st, m, out.notes, out.trials), out.trials
        commit(m, out.placement, st.inv)
        placed += 1
        turn += 1
        counts.placed[m.name] = placed
        rid = st.ledger.new_id(m.name)
        st.ledger.start(m.name, out.placement, rid, _start_reason(st, m, have + placed))
    return None, []


def _short_of_room(
    st: PassState, m: Model, notes: list[str], trials: list[ProfileTrial]
) -> PendingWhy:
    """Why no profile placed and no preemption was made: every profile's quota limit, or too
    little room, and what held a preemption back if something did."""
    pending = "; ".join(notes)
    held_back = st.turns.held_back.get(m.name)
    if held_back is not None:
        return "preemption_held_back", pending + "; " + held_back
    if trials and all(t.note is not None for t in trials):
        return "quota_limit", pending
    return "no_room", pending


def _start_reason(st: PassState, m: Model, count: int) -> StartWhy:
    if m.name in st.ledger.rolling:
        return ROLLING_START
    w = st.counts.wants[m.name]
    # "scale up: 3 replicas: ttft p90 840 ms > 500 ms objective (...), 2 of 3 replicas"
    return "scale_up", f"scale up: {w.why}, {count} of {w.count} replicas"


def _pool(st: PassState) -> VictimPool:
    pool = st.ledger.pool
    if pool is None:
        pool = st.ledger.pool = VictimPool(st.snapshot, st.inv, st.ledger.stopped)
        pool.fair = st.turns.fair
    return pool


def preempt_for(st: PassState, m: Model, missing: int, live: int) -> bool:
    """Victims for every replica still missing, each set tried on the room the earlier ones
    leave (so no room is preempted twice for two models); the free room the model counts on
    besides is held back. Whether any replica was stopped."""
    limit = st.settings.max_victims
    if limit == 0:
        return False
    pool = _pool(st)
    trial = st.inv.clone()
    gone = False
    future: list[Placement] = []  # where the missing replicas will go
    for _ in range(missing):
        fitted = st.placer.place(m, trial, explain=False).placement
        if fitted is None:
            cands = pool.candidates(m, trial, live + len(future))
            over: list[int] = []
            chosen = choose(m, cands, trial, limit, st.placer, over)
            if chosen and not pool.fair_set(m, chosen, trial):
                chosen = []  # rule R7 holds per victim, not for the set
            if not chosen:
                if not gone:
                    _say_held_back(st, m, trial, live + len(future), over)
                break
            for v in chosen:
                why = (stop_code(v), stop_reason(v, m))
                st.ledger.stop(v.replica.id, v.model.name, why, m.name)
                trial.release(v.replica.id)
                st.holds.give(v.model.name, m.name)
            gone = True
            fitted = st.placer.place(m, trial, explain=False).placement
            if fitted is None:
                break
        commit(m, fitted, trial)
        future.append(fitted)
    if gone:
        _hold_back(st.inv, future)
        for placement in future:  # its owner holds them from now on (guarantee, limits)
            st.inv.charge(m.owner, profile_need(placement.profile))
    return gone


def _say_held_back(st: PassState, m: Model, trial: Inventory, live: int, over: list[int]) -> None:
    """Why a preemption that could make room for `m` was not made: more victims than
    max_victims, min_lifetime_s, or room kept for another model."""
    limit = st.settings.max_victims
    if over:
        st.turns.held_back[m.name] = (
            f"preempting would take up to {min(over)} replicas, more than max_victims ({limit})"
        )
        return
    turns = st.turns
    if turns.why_held is None:
        pool = st.ledger.pool
        assert pool is not None
        turns.why_held = HeldBack(st.snapshot, st.inv, st.placer, pool, st.counts.short)
    why = turns.why_held.why(m, trial, live, limit, st.ledger.stops)
    if why is not None:
        turns.held_back[m.name] = why


def reserve(st: PassState, m: Model, gone: list[str], missing: int) -> None:
    """Keep for `m` the free room it will need beside what `gone` frees, for the rest of the
    pass: placed in a trial, and whatever of that is free now is held back."""
    trial = st.inv.clone()
    for rid in gone:
        trial.release(rid)
    future: list[Placement] = []
    for _ in range(missing):
        fitted = st.placer.place(m, trial, explain=False).placement
        if fitted is None:
            break
        commit(m, fitted, trial)
        future.append(fitted)
    _hold_back(st.inv, future)
    for placement in future:  # its owner holds them already (guarantee, limits)
        st.inv.charge(m.owner, profile_need(placement.profile))


def _hold_back(inv: Inventory, future: list[Placement]) -> None:
    """Reserve the devices of placements-to-be that are free now (the rest are the victims')."""
    for placement in future:
        for sh in placement.shards:
            free = [d for d in sh.gpus if inv.is_free(sh.node, d)]
            if free:
                inv.reserve(sh.node, free)
