"""Replicas that go whatever the placement (docs/decision-core.md, rules L1, L2, S2): load-grace
time-outs, drains, deleted models, scale-downs and replicas of removed profiles."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.core.lifecycle import renew, stall
from scheduler.core.models import Model, ModelStatus, Replica, StoppedReplica, rfc3339
from scheduler.core.pass_state import PassState, StopWhy
from scheduler.core.replacement import replace, retire_one

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
DRAIN: tuple[StopWhy, StopWhy] = (
    ("draining", "its node is draining and it is not serving yet"),
    ("draining", "its node is draining; replaced elsewhere"),
)


def retire(st: PassState) -> None:
    """Replicas that go whatever the demand. One still starting past its model's load_grace_s
    is stopped. One on a draining node no longer counts as live, so the model grows a
    replacement elsewhere (where room allows) while it still serves; it is stopped once it
    is not serving, or once enough replicas elsewhere run (make-before-break). Roll-outs and
    moves under way are renewed first (lifecycle.renew)."""
    draining = {n.id for n in st.snapshot.nodes if n.draining}
    for m in st.snapshot.models:
        renew(st, m)
        if not draining and m.name not in st.inv.facts.starting:
            continue  # the common case: nothing to look at
        # A replica of a removed profile is not counted already; replace_stale sees to it.
        counting = sorted(st.inv.facts.current.get(m.name, ()), key=lambda r: (r.created_at, r.id))
        movers: list[Replica] = []
        for r in counting:
            if r.id in st.ledger.retired:
                continue  # already being replaced (rolling update)
            if r.state == "starting" and _timed_out(st, m, r):
                continue
            if draining and any(sh.node in draining for sh in r.shards):
                movers.append(r)
                st.ledger.retired.add(r.id)
                st.counts.live[m.name] -= 1
        if movers:
            replace(st, m, movers, counting, DRAIN)


def timed_out_at(created_at: datetime, load_grace_s: int) -> datetime:
    """When a replica still starting is past its load grace: its age in whole seconds is
    above the grace from then on (calm.py's threshold too)."""
    return created_at + timedelta(seconds=load_grace_s + 1)


def _timed_out(st: PassState, m: Model, r: Replica) -> bool:
    """A replica still starting past its model's load grace is stopped. Still counted in
    this pass (its room is not free yet): replaced once it is stopping, not alongside it."""
    if st.now < timed_out_at(r.created_at, m.load_grace_s):
        return False
    age = int((st.now - r.created_at).total_seconds())
    reason = f"still starting after {age}s, past its load grace of {m.load_grace_s}s"
    retire_one(st, r, m, ("timed_out", reason))
    noted = StoppedReplica(replica=r.id, code="timed_out", reason=reason)
    st.ledger.timed_out.setdefault(m.name, []).append(noted)
    st.counts.timed_out[m.name] = st.counts.timed_out.get(m.name, 0) + 1
    stall(st, m, r)
    return True


def retire_deleted(st: PassState) -> dict[str, ModelStatus]:
    """Stop the replicas of models whose key was deleted, once the grace has passed (a key
    deleted by mistake can be put back in time); their statuses say when."""
    grace = timedelta(seconds=st.settings.retire_grace_s)
    statuses: dict[str, ModelStatus] = {}
    for name, since in sorted(st.snapshot.retired.items()):
        if name in st.counts.desired:
            continue  # back in the catalog
        reps = sorted(
            (r for r in st.inv.facts.by_model.get(name, []) if r.counts), key=lambda r: r.id
        )
        due = since + grace
        if reps and st.now >= due:
            for r in reps:
                why = f"retired: its key was deleted at {rfc3339(since)}"
                st.ledger.stop(r.id, name, ("retired", why))
        pending = None
        if reps and st.now < due:
            pending = f"retiring: its key was deleted; its replicas stop at {rfc3339(due)}"
        statuses[name] = ModelStatus(
            desired=0,
            live=len(reps),
            pending=pending,
            pending_code="retiring" if pending is not None else None,
        )
    return statuses


def scale_down(st: PassState) -> None:
    """Before any growth: scale-downs do not depend on placement, and preemption must not
    pick a replica that is stopped anyway (nor count it towards a minimum). The newest go."""
    counts = st.counts
    for m in st.snapshot.models:
        name = m.name
        want = counts.desired[name]
        have = counts.live[name] - counts.timed_out.get(name, 0)
        if have <= want:
            continue
        reps = sorted(
            (r for r in st.inv.facts.current.get(name, ()) if r.id not in st.ledger.retired),
            key=lambda r: (r.created_at, r.id),
            reverse=True,
        )
        for r in reps[: have - want]:
            why = f"scale down: {have} live, {counts.wants[name].why}"
            st.ledger.stop(r.id, name, ("scale_down", why))


def replace_stale(st: PassState) -> None:
    """Make before break: a replica of a removed profile stops once enough replicas of
    current profiles run (or the model wants none)."""
    stopped = st.ledger.stopped
    for m in st.snapshot.models:
        old = st.counts.stale.get(m.name)
        if not old:
            continue
        want = st.counts.desired[m.name]
        running = sum(
            1
            for r in st.inv.facts.current.get(m.name, ())
            if r.state == "running" and r.id not in stopped
        )
        if want > 0 and running < want:
            continue
        for r in old:
            why = f"replaced: profile {r.profile} is no longer in the model"
            st.ledger.stop(r.id, m.name, ("profile_removed", why))
