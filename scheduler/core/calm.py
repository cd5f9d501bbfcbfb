"""When could the same snapshot be decided differently by the clock alone?

`calm_until(snapshot, plan)`: the earliest instant after `snapshot.now` at which `decide()` on
the same snapshot with a later `now` could return another plan; None when the clock alone
never changes it. The service carries a quiet pass over (no snapshot, no decision) only
before that instant.

Every rule that reads `now` has one entry in THRESHOLDS, which asks the rule's own module
for its instants where the rule has them (grep `now` in scheduler/core when adding one).
Early is safe (it only costs a full pass); late is a bug, which tests/core/test_calm.py hunts
for. Thresholds are taken for every replica and model the rule could look at, not only those
it did look at in this plan: conservative, and it keeps each threshold next to a plain
reading of its rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from scheduler.core.defragment import next_turn
from scheduler.core.models import Plan, Snapshot
from scheduler.core.retirement import timed_out_at
from scheduler.core.scaling import window_of

Instants = Iterator[datetime | None]


def _holds(snap: Snapshot, plan: Plan) -> Instants:
    """Holds (rule R5): honoured and handed on while now < until."""
    for h in snap.holds.values():
        yield h.until


def _reservations(snap: Snapshot, plan: Plan) -> Instants:
    """Room kept after a preemption (rule R5): handed on while now < until."""
    for kept in snap.reservations.values():
        for res in kept:
            yield res.until


def _replicas(snap: Snapshot, plan: Plan) -> Instants:
    """Per replica: settled (rule R3's min_lifetime_s, held_back, consolidation and
    defragmentation's movable replicas), timed out (rule L2), idle (rules R2, S3). Compared
    before added: only the few stamps still ahead of a threshold cost a datetime."""
    now, s = snap.now, snap.settings
    lifetime = timedelta(seconds=s.min_lifetime_s)
    grace = timedelta(seconds=s.eviction_grace_s)
    fresh_after, idle_after = now - lifetime, now - grace
    models = {m.name: m for m in snap.models}
    for r in snap.replicas:
        if r.ready_at is not None and r.ready_at > fresh_after:
            yield r.ready_at + lifetime
        if r.state == "starting" and (m := models.get(r.model)) is not None:
            yield timed_out_at(r.created_at, m.load_grace_s)
        used = r.last_used_at
        if used is not None and used > idle_after:
            # An unknown use counts as idle 0 s, so a use stamped in the future reorders
            # victims once it is reached.
            yield used
            yield used + grace


def _demand(snap: Snapshot, plan: Plan) -> Instants:
    """Rule S3: an on-demand model's last use, idle once the grace has passed."""
    grace = timedelta(seconds=snap.settings.eviction_grace_s)
    for d in snap.demand.values():
        if d.last_used is not None and d.last_used > snap.now - grace:
            yield d.last_used
            yield d.last_used + grace


def _windows(snap: Snapshot, plan: Plan) -> Instants:
    """Rule S2: a mark counts while now < at + window, and the window is watched whole once
    one is older than that. The adapter hands this pass's own mark (scaling.remember, at now)
    to the next passes: it starts to be old enough at now + window."""
    now = snap.now
    windows: set[int] = set()
    marks = snap.recent_desired
    for m in snap.models:
        window = window_of(m, snap.settings)
        if window <= 0:
            continue
        windows.add(window)
        if marks.get(m.name):
            span = timedelta(seconds=window)
            start = now - span
            # The earliest mark still inside the window leaves it first.
            yield min((mk.at for mk in marks[m.name] if mk.at > start), default=now) + span
    for window in windows:
        yield now + timedelta(seconds=window)


def _deleted(snap: Snapshot, plan: Plan) -> Instants:
    """Deleted models (rule L2): their replicas stop at since + retire_grace_s."""
    retire = timedelta(seconds=snap.settings.retire_grace_s)
    for since in snap.retired.values():
        yield since + retire


def _removed_profiles(snap: Snapshot, plan: Plan) -> Instants:
    """Replicas of a removed profile (rule L2): they stop at since + retire_grace_s."""
    retire = timedelta(seconds=snap.settings.retire_grace_s)
    for profiles in snap.removed_profiles.values():
        for since in profiles.values():
            yield since + retire


def _defragment_turn(snap: Snapshot, plan: Plan) -> Instants:
    """Defragmentation's turn among the models waiting for room (pending, with trials)."""
    waiting = sum(1 for st in plan.models.values() if st.pending is not None and st.tried)
    if waiting > 1 and snap.settings.consolidate_per_pass > 0:
        yield next_turn(snap.now)


def _usage(snap: Snapshot, plan: Plan) -> Instants:
    """Rule F4: with usage_half_life_s set, the usage the plan hands on decays and accrues
    with every second. Carried passes lose none of it (the next pass adds the whole time
    since, and what owners hold did not change meanwhile); what it changes in the shares is
    read again at least once a minute."""
    if snap.settings.usage_half_life_s > 0 and plan.usage:
        yield snap.now + timedelta(seconds=60)


THRESHOLDS: tuple[Callable[[Snapshot, Plan], Instants], ...] = (
    _holds,
    _reservations,
    _usage,
    _replicas,
    _demand,
    _windows,
    _deleted,
    _removed_profiles,
    _defragment_turn,
)


def calm_until(snapshot: Snapshot, plan: Plan) -> datetime | None:
    now = snapshot.now
    soonest: datetime | None = None
    for instants in THRESHOLDS:
        for t in instants(snapshot, plan):
            if t is not None and t > now and (soonest is None or t < soonest):
                soonest = t
    return soonest
