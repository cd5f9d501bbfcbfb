"""Properties of a plan's statuses and scale-downs, checked on one snapshot and its plan."""

from __future__ import annotations

import math
from dataclasses import dataclass

from plan_checks import (
    check_devices,
    check_node_resources,
    check_quotas,
    check_stops,
    retired,
)
from plan_index import Index, being_replaced
from scenario_runs import starts_of, stops_of

from scheduler.core.models import Model, ModelStatus, Plan, Snapshot

# Stops of replicas replaced make-before-break (rule L1): they count toward no desired count.
REPLACED: frozenset[str] = frozenset(
    {
        "draining",
        "unhealthy_gpu",
        "rolling_update",
        "rollout_stalled",
        "consolidation",
        "profile_removed",
    }
)


@dataclass
class Replaced:
    """A model's live replicas that do not count toward its desired count in this pass, as
    the snapshot says (rule L1), and how many more a roll-out may be replacing unseen."""

    ids: set[str]
    unseen: int


def replaced(snap: Snapshot, idx: Index, m: Model, desired: int, plan: Plan) -> Replaced:
    """On a removed profile, on a draining node (unless stopped as timed out), moved or on a
    worse profile (being_replaced), or stopped by the plan as replaced. Outdated replicas of a
    roll-out not stopped yet may be replaced too (the surge decides how many): `unseen`."""
    stops = [a for a in stops_of(plan) if a.model == m.name]
    timed_out = {a.replica for a in stops if retired(a)}
    draining = {n.id for n in snap.nodes if n.draining}
    ids = being_replaced(snap, idx, m, desired)
    for r in idx.live(m.name):
        if m.profile(r.profile) is None or any(sh.node in draining for sh in r.shards):
            ids.add(r.id)
    ids |= {a.replica for a in stops if a.code in REPLACED}
    ids -= timed_out
    specs = snap.specs.get(m.name) or {}
    outdated = {
        r.id
        for r in idx.live(m.name)
        if r.spec and specs.get(r.profile) and r.spec != specs[r.profile]
    }
    return Replaced(ids, len(outdated - ids - timed_out))


def check_statuses(snap: Snapshot, plan: Plan) -> None:
    """P6: every model reported; desired within bounds; live counted; pending as it should."""
    idx = Index.of(snap)
    assert set(plan.models) == set(idx.models)
    starts, scale_downs = _growth_and_scale_downs(plan)
    live_holds = {
        name
        for name, h in snap.holds.items()
        if snap.now < h.until
        and h.for_ in plan.models
        and plan.models[h.for_].live < plan.models[h.for_].desired
    }
    for name, status in plan.models.items():
        m = idx.models[name]
        _check_desired(snap, idx, m, status)
        # A removed profile's replica is not live: it is replaced (rule L1).
        current = {r.id for r in idx.live(name) if m.profile(r.profile) is not None}
        assert status.live == len(current)
        _check_replaced_stops(snap, idx, m, status.desired, plan)
        # Replicas replaced make-before-break are not live for scaling: never scaled down, and
        # the model grows their replacements (they stop once the others cover for them).
        gone = replaced(snap, idx, m, status.desired, plan)
        live = status.live - len(gone.ids & current)
        # What placement grows to: desired, less what the scale-down window only keeps.
        target = status.desired
        if status.recommended is not None:
            target = min(target, status.recommended)
        got = starts.get(name, 0)
        assert got <= max(target - live + gone.unseen, 0), f"{name}: started past desired"
        timed_out = sum(1 for a in stops_of(plan) if a.model == name and retired(a))
        most = max(live - timed_out - status.desired, 0)
        least = max(live - gone.unseen - timed_out - status.desired, 0)
        assert least <= scale_downs.get(name, 0) <= most, f"{name}: scaled down wrongly"
        if live - gone.unseen + got >= target:
            # Only a removed profile's replicas, still holding room, are named then (rule L2).
            named = status.pending is None or status.pending_code == "profile_removed"
            assert named, f"{name}: pending though it has what it wants"
        elif live + got < target:
            assert status.pending and status.pending.strip(), f"{name}: short, no reason"
        if name in live_holds:
            assert got == 0, f"{name} started while held"
            assert name in plan.holds
    taken = {r.id for r in snap.replicas}
    new_ids = [a.replica for a in starts_of(plan)]
    assert len(set(new_ids)) == len(new_ids) and not taken & set(new_ids)
    assert all(a.reason.strip() for a in starts_of(plan))


def _check_replaced_stops(snap: Snapshot, idx: Index, m: Model, desired: int, plan: Plan) -> None:
    """A stop coded as a replacement names a replica the snapshot says is replaced so."""
    draining = {n.id for n in snap.nodes if n.draining}
    moving = being_replaced(snap, idx, m, desired)
    specs = snap.specs.get(m.name) or {}
    for a in stops_of(plan):
        if a.model != m.name or a.code not in REPLACED:
            continue
        r = idx.replicas[a.replica]
        if a.code == "draining":
            assert any(sh.node in draining for sh in r.shards), f"{r.id}: not draining"
        elif a.code == "profile_removed":
            assert m.profile(r.profile) is None, f"{r.id}: its profile is still there"
        elif a.code == "consolidation":
            assert r.id in moving, f"{m.name}: consolidation stops {r.id}"
        elif a.code == "rolling_update":
            assert r.spec and specs.get(r.profile) not in (None, r.spec), f"{r.id}: current"
        elif a.code == "rollout_stalled":
            assert r.state == "starting", f"{r.id}: a stalled roll-out stops a serving replica"


def _growth_and_scale_downs(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """Per model: replicas started as growth, and stopped by scale-down (by the stop's code)."""
    starts: dict[str, int] = {}
    # A move's replacement (consolidation, defragmentation) starts beside the replica
    # it replaces, make-before-break: it is not growth past desired.
    moving = set(plan.moves.values())
    for a in starts_of(plan):
        if a.replica not in moving:
            starts[a.model] = starts.get(a.model, 0) + 1
    scale_downs: dict[str, int] = {}
    for stop in stops_of(plan):
        if stop.code == "scale_down":
            assert stop.preempted_for is None
            scale_downs[stop.model] = scale_downs.get(stop.model, 0) + 1
    return starts, scale_downs


def _check_desired(snap: Snapshot, idx: Index, m: Model, status: ModelStatus) -> None:
    """Desired within the model's bounds, and what its demand asks."""
    name, sc = m.name, m.scaling
    demand = snap.demand.get(name)
    load = demand.inflight + demand.queued if demand else 0
    if sc.on_demand:
        assert status.desired == 0 or sc.min <= status.desired <= sc.max
        if load > 0 and sc.max > 0:
            assert status.desired >= 1, f"{name}: busy on-demand model wants 0"
        return
    assert sc.min <= status.desired <= sc.max
    if demand is not None:
        # ceil(load / target), or what is serving when within 10% of it
        serving = sum(1 for r in idx.live(name) if r.state == "running")
        need = load / sc.target_per_replica
        raw = math.ceil(need)
        if serving and abs(need / serving - 1) <= 0.1:
            raw = serving
        asked = min(max(raw, sc.min), sc.max)
        assert status.recommended in (None, asked)
        # The scale-down window may keep live replicas above what is asked,
        # never more than are live.
        assert asked <= status.desired <= max(asked, status.live)


def check_scale_down(snap: Snapshot, plan: Plan) -> None:
    """P9: scale-down stops take the newest live replicas, down to desired, never below min
    (only an idle on-demand model goes below its min: to zero)."""
    idx = Index.of(snap)
    by_model: dict[str, set[str]] = {}
    for a in stops_of(plan):
        if a.code == "scale_down":
            assert a.preempted_for is None
            by_model.setdefault(a.model, set()).add(a.replica)
    # Replicas that go whatever the demand (load-grace time-outs) are not the scale-down's
    # to choose.
    gone = {a.replica for a in stops_of(plan) if retired(a)}
    for name, ids in by_model.items():
        # Nor are replicas replaced make-before-break (kept until the others cover for them).
        gone |= replaced(snap, idx, idx.models[name], plan.models[name].desired, plan).ids
        live = sorted(
            (r for r in idx.live(name) if r.id not in gone),
            key=lambda r: (r.created_at, r.id),
            reverse=True,
        )
        assert ids == {r.id for r in live[: len(ids)]}, f"{name}: scale-down not newest first"
        left = len(live) - len(ids)
        assert left == plan.models[name].desired
        m = idx.models[name]
        assert left >= m.scaling.min or (m.scaling.on_demand and left == 0)


def check_no_flip_flop(plan: Plan) -> None:
    """A plan never both starts and stops replicas of one model (that is pure churn)."""
    started = {a.model for a in starts_of(plan)}
    stopped = {a.model for a in stops_of(plan) if not retired(a)}
    assert not started & stopped, f"started and stopped in one plan: {sorted(started & stopped)}"


def check_all(snap: Snapshot, plan: Plan) -> list[tuple[str, str]]:
    check_devices(snap, plan)
    check_node_resources(snap, plan)
    check_quotas(snap, plan)
    check_statuses(snap, plan)
    check_scale_down(snap, plan)
    return check_stops(snap, plan)
