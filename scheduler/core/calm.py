"""When could the same snapshot be decided differently by the clock alone? (issue 15)

`calm_until(snapshot, plan)`: the earliest instant after `snapshot.now` at which `decide()` on
the same snapshot with a later `now` could return another plan; None when the clock alone
never changes it. The service carries a quiet pass over (no snapshot, no decision) only
before that instant.

Every place the core reads `now` has its threshold here, rule by rule (grep `now` in
scheduler/core when adding one). Early is safe (it only costs a full pass); late is a bug,
which tests/core/test_calm.py hunts for. Thresholds are taken for every replica and model the
rule could look at, not only those it did look at in this plan: conservative, and it keeps
each threshold next to a plain reading of its rule.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.core.defragment import next_turn
from scheduler.core.models import Plan, Snapshot
from scheduler.core.scaling import window_of


def calm_until(snapshot: Snapshot, plan: Plan) -> datetime | None:
    now = snapshot.now
    s = snapshot.settings
    soonest: datetime | None = None

    def at(t: datetime | None) -> None:
        nonlocal soonest
        if t is not None and t > now and (soonest is None or t < soonest):
            soonest = t

    # Holds (decide.py): honoured and handed on while now < until.
    for h in snapshot.holds.values():
        at(h.until)
    lifetime = timedelta(seconds=s.min_lifetime_s)
    grace = timedelta(seconds=s.eviction_grace_s)
    # Compared before added: only the few stamps still ahead of a threshold cost a datetime.
    fresh_after, idle_after = now - lifetime, now - grace
    models = {m.name: m for m in snapshot.models}
    for r in snapshot.replicas:
        if r.ready_at is not None and r.ready_at > fresh_after:
            # Settled / fresh: preemption (R3), held_back's "may give way from", consolidation
            # and defragmentation's movable replicas.
            at(r.ready_at + lifetime)
        if r.state == "starting" and (m := models.get(r.model)) is not None:
            # retirement.retire: int(seconds since created) > load_grace_s, so a second later.
            at(r.created_at + timedelta(seconds=m.load_grace_s + 1))
        used = r.last_used_at
        if used is not None and used > idle_after:
            # Idle on-demand victims (R2) and S3's last use; an unknown use counts as idle 0 s,
            # so a use stamped in the future reorders victims once it is reached.
            at(used)
            at(used + grace)
    for d in snapshot.demand.values():
        if d.last_used is not None and d.last_used > idle_after:  # S3: idle for the grace
            at(d.last_used)
            at(d.last_used + grace)
    # S2: a mark counts while now < at + window, and the window is watched whole once one is
    # older than that. The adapter hands this pass's own mark (scaling.remember, at now) to the
    # next passes: it starts to be old enough at now + window.
    windows: set[int] = set()
    marks = snapshot.recent_desired
    for m in snapshot.models:
        window = window_of(m, s)
        if window <= 0:
            continue
        windows.add(window)
        if marks.get(m.name):
            span = timedelta(seconds=window)
            start = now - span
            # The earliest mark still inside the window leaves it first.
            at(min((mk.at for mk in marks[m.name] if mk.at > start), default=now) + span)
    for window in windows:
        at(now + timedelta(seconds=window))
    # Deleted models (retirement.retire_deleted): their replicas stop at since + grace.
    retire = timedelta(seconds=s.retire_grace_s)
    for since in snapshot.retired.values():
        at(since + retire)
    # Defragmentation's turn among the models waiting for room (status pending, with trials).
    waiting = sum(1 for st in plan.models.values() if st.pending is not None and st.tried)
    if waiting > 1 and s.consolidate_per_pass > 0:
        at(next_turn(now))
    return soonest
