"""Replicas that go whatever the placement (docs/decision-core.md, rules L1, L2, S2): load-grace
time-outs, drains, deleted models, scale-downs and replicas of removed profiles."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from scheduler.core.facts import Shape
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
    is stopped. One on a draining node, or on a device its node's reporter marked unhealthy,
    no longer counts as live, so the model grows a replacement elsewhere (where room allows)
    while it still serves; it is stopped once it is not serving, or once enough replicas
    elsewhere run (make-before-break). Roll-outs and moves under way are renewed first
    (lifecycle.renew)."""
    draining = {n.id for n in st.snapshot.nodes if n.draining}
    sick, sick_models = unhealthy_devices(st)
    for m in st.snapshot.models:
        name = m.name
        current = st.inv.facts.current.get(name, ())
        quiet = not draining and name not in st.inv.facts.starting
        if quiet and (name not in sick_models or not _holds_any(current, sick)):
            renew(st, m)
            continue  # the common case: nothing else to look at
        # A replica of a removed profile is not counted already; replace_stale sees to it.
        counting = sorted(current, key=lambda r: (r.created_at, r.id))
        # Marked before the roll-outs and moves are renewed: a replica replaced whatever the
        # demand is not one of the live replicas they count (nor the better one they keep).
        movers: list[Replica] = []
        whys: dict[str, tuple[StopWhy, StopWhy]] = {}
        for r in counting:
            if r.state == "starting" and st.now >= timed_out_at(r.created_at, m.load_grace_s):
                continue  # stopped as timed out below
            why = _replaced_why(r, draining, sick)
            if why is not None:
                movers.append(r)
                whys[r.id] = why
                st.ledger.retired.add(r.id)
                st.counts.live[name] -= 1
        renew(st, m)
        for r in counting:
            if r.id not in st.ledger.retired and r.state == "starting":
                _timed_out(st, m, r)
        if movers:
            replace(st, m, movers, counting, DRAIN, whys)
            _say_sick(st, m, [r for r in movers if whys[r.id] is not DRAIN], sick)


def _replaced_why(
    r: Replica, draining: set[str], sick: dict[str, str]
) -> tuple[StopWhy, StopWhy] | None:
    """Why the replica is replaced whatever the demand (None: it is not)."""
    if draining and any(sh.node in draining for sh in r.shards):
        return DRAIN
    for sh in r.shards if sick else ():
        for d in sh.gpus:
            if d in sick:
                where = f"its GPU {d} on {sh.node} is unhealthy"
                return ("unhealthy_gpu", f"{where}; not serving yet"), (
                    "unhealthy_gpu",
                    f"{where}; replaced elsewhere",
                )
    return None


def _holds_any(replicas: Sequence[Replica], devices: dict[str, str]) -> bool:
    return any(d in devices for r in replicas for sh in r.shards for d in sh.gpus)


def _say_sick(st: PassState, m: Model, movers: list[Replica], sick: dict[str, str]) -> None:
    """The model's status says which replicas are replaced for an unhealthy device."""
    if not movers:
        return
    devices = sorted({d for r in movers for sh in r.shards for d in sh.gpus if d in sick})
    where = ", ".join(f"{d} on {sick[d]}" for d in devices)
    n = len(movers)
    said = f"replacing {n} replica{'s' if n != 1 else ''} on an unhealthy GPU ({where})"
    before = st.ledger.rollout.get(m.name)
    st.ledger.rollout[m.name] = said if before is None else f"{before}; {said}"


def unhealthy_devices(st: PassState) -> tuple[dict[str, str], set[str]]:
    """The devices the node's reporter marked unhealthy (XID errors, ECC, lost: a whole GPU, a
    MIG slice, or every slice of an unhealthy GPU) on nodes holding replicas, with their node,
    and the models with replicas there. Only nodes that hold replicas and whose shape shows an
    unhealthy GPU, or MIG GPUs (a slice's health is not in the shape), are looked into."""
    suspect = {ns.kind for ns in st.inv.kinds if _may_be_sick(ns.shape)}
    sick: dict[str, str] = {}
    models: set[str] = set()
    if not suspect:
        return sick, models
    for node in st.snapshot.nodes:
        ns = st.inv.nodes[node.id]
        if ns.kind not in suspect or not ns.per_model:
            continue
        found = False
        for gpu in node.gpus:
            for d in [gpu, *(gpu.mig or ())]:
                if not (d.healthy and gpu.healthy):
                    sick[d.id] = node.id
                    found = True
        if found:
            models.update(ns.per_model)
    return sick, models


def _may_be_sick(shape: Shape) -> bool:
    _, whole, mig = shape
    return bool(mig) or any(not healthy for _, _, healthy in whole)


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


def replace_stale(st: PassState) -> dict[str, str]:
    """Make before break: a replica of a removed profile stops once enough replicas of
    current profiles run (or the model wants none), or once settings.retire_grace_s has
    passed since its profile went missing (Snapshot.removed_profiles), replaced or not.
    Returns, per model, what its replicas of removed profiles still hold and until when."""
    stopped = st.ledger.stopped
    grace = timedelta(seconds=st.settings.retire_grace_s)
    kept: dict[str, str] = {}
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
        since = st.snapshot.removed_profiles.get(m.name, {})
        stays: list[Replica] = []
        for r in old:
            gone = since.get(r.profile)
            if want <= 0 or running >= want:
                why = f"replaced: profile {r.profile} is no longer in the model"
            elif gone is not None and st.now >= gone + grace:
                why = (
                    f"replaced: profile {r.profile} is no longer in the model (since "
                    f"{rfc3339(gone)}); its retire grace has passed"
                )
            else:
                stays.append(r)
                continue
            st.ledger.stop(r.id, m.name, ("profile_removed", why))
        if stays:
            kept[m.name] = _stale_words(stays, since, grace)
    return kept


def _stale_words(stays: list[Replica], since: dict[str, datetime], grace: timedelta) -> str:
    """What replicas of removed profiles hold, and until when."""
    n = len(stays)
    profiles = sorted({r.profile for r in stays})
    dates = [since[p] + grace for p in profiles if p in since]
    until = f", at the latest until {rfc3339(min(dates))} (retire grace)" if dates else ""
    plural = "s" if len(profiles) > 1 else ""
    held = "holds its" if n == 1 else "hold their"
    return (
        f"removed profile{plural} {', '.join(profiles)}: {n} replica{'s' if n != 1 else ''} "
        f"{held} room until current replicas run{until}"
    )


def name_stale(statuses: dict[str, ModelStatus], kept: dict[str, str]) -> None:
    """A model whose replicas of removed profiles stay names them in its pending sentence."""
    for name, words in kept.items():
        status = statuses[name]
        if status.pending is None:
            update = {"pending": words, "pending_code": "profile_removed"}
        else:
            update = {"pending": f"{status.pending}; {words}"}
        statuses[name] = status.model_copy(update=update)
