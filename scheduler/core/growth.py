"""One model's turn to grow: place its missing replicas, or preempt for them (rules R1-R6),
or say why it waits (held, waiting for its victims, no room)."""

from __future__ import annotations

from scheduler.core.held_back import HeldBack
from scheduler.core.inventory import Inventory
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
from scheduler.core.reservations import made
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
        if not st.reservations.room_of(m.name):  # victims stopped before rooms were kept
            _keep_room(st, m, gone, st.counts.target[m.name] - st.counts.live[m.name])
        return WAITING
    return None


def grow(st: PassState, m: Model, cap: int | None = None) -> Outcome:
    """Place up to `cap` of the model's missing replicas, or preempt for them: its pending
    sentence (None: placed them) and what its profiles ran into. The room kept for it is its
    own for the turn (rule R5)."""
    waits = _waits(st, m)
    if waits is not None:
        return waits, []
    kept = st.reservations.room_of(m.name)
    if kept:
        st.reservations.open(st.inv, m)
    placed: list[Placement] = []
    outcome = _place(st, m, cap, placed)
    if kept:
        st.reservations.close(st.inv, m, placed, st.counts.short(m.name))
    return outcome


def _place(st: PassState, m: Model, cap: int | None, placed: list[Placement]) -> Outcome:
    counts = st.counts
    want, have = counts.target[m.name], counts.live[m.name]
    n = counts.placed.get(m.name, 0)
    while have + n < want and (cap is None or len(placed) < cap):
        out = st.placer.place(m, st.inv)
        if out.placement is None:
            # In the guarantee phase only what is owed may be reclaimed.
            ask = cap - len(placed) if st.turns.owing and cap is not None else want - have - n
            if preempt_for(st, m, ask, have + n):
                return WAITING, out.trials
            return _short_of_room(st, m, out.notes, out.trials), out.trials
        commit(m, out.placement, st.inv)
        placed.append(out.placement)
        n += 1
        counts.placed[m.name] = n
        rid = st.ledger.new_id(m.name)
        st.ledger.start(m.name, out.placement, rid, _start_reason(st, m, have + n))
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
                st.reservations.victims.setdefault(m.name, []).append(v.replica.id)
                trial.release(v.replica.id)
                st.holds.give(v.model.name, m.name)
            gone = True
            fitted = st.placer.place(m, trial, explain=False).placement
            if fitted is None:
                break
        commit(m, fitted, trial)
        future.append(fitted)
    if gone:
        _keep(st, m, future)
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
        turns.why_held = HeldBack(
            st.snapshot, st.inv, st.placer, pool, st.counts.short, st.reservations
        )
    why = turns.why_held.why(m, trial, live, limit)
    if why is not None:
        turns.held_back[m.name] = why


def _keep_room(st: PassState, m: Model, gone: list[str], missing: int) -> None:
    """Keep for `m`, in this pass, the room its replicas would take once `gone` (its victims,
    stopping since before the state kept reservations) is gone: not handed on, as when they
    were preempted is not known."""
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
    st.reservations.hold(st.inv, m, made(st.now, st.now, future), hand_on=False)


def _keep(st: PassState, m: Model, future: list[Placement]) -> None:
    """The room of the replicas to come is theirs (rule R5): held back from every other model,
    in this pass and, handed on by the plan, in the next ones."""
    res = st.reservations
    res.lasting.add(m.name)
    res.hold(st.inv, m, made(st.now, st.holds.until, future))
