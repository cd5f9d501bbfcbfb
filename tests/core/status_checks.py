"""Properties of a plan's statuses and scale-downs, checked on one snapshot and its plan."""

from __future__ import annotations

import math

from plan_checks import (
    Index,
    being_replaced,
    check_devices,
    check_node_resources,
    check_quotas,
    check_stops,
    retired,
)
from scenario_runs import starts_of, stops_of

from scheduler.core.models import Model, ModelStatus, Plan, Snapshot


def check_statuses(snap: Snapshot, plan: Plan) -> None:
    """P6: every model reported; desired within bounds; live counted; pending as it should."""
    idx = Index.of(snap)
    assert set(plan.models) == set(idx.models)
    starts, scale_downs, replaced_stops = _growth_and_stops(plan)
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
        assert status.live == len(idx.live(name))
        # Replicas replaced make-before-break are not live for scaling: never scaled down, and
        # the model grows their replacements (they stop once the others cover for them).
        old = len(being_replaced(snap, idx, m, status.desired))
        assert replaced_stops.get(name, 0) <= old, f"{name}: consolidation stops a replica"
        live = status.live - old
        # What placement grows to: desired, less what the scale-down window only keeps.
        target = status.desired
        if status.recommended is not None:
            target = min(target, status.recommended)
        got = starts.get(name, 0)
        assert got <= max(target - live, 0), f"{name}: started past desired"
        timed_out = sum(1 for a in stops_of(plan) if a.model == name and retired(a))
        assert scale_downs.get(name, 0) == max(live - timed_out - status.desired, 0)
        if live + got >= target:
            assert status.pending is None, f"{name}: pending though it has what it wants"
        else:
            assert status.pending and status.pending.strip(), f"{name}: short, no reason"
        if name in live_holds:
            assert got == 0, f"{name} started while held"
            assert name in plan.holds
    taken = {r.id for r in snap.replicas}
    new_ids = [a.replica for a in starts_of(plan)]
    assert len(set(new_ids)) == len(new_ids) and not taken & set(new_ids)
    assert all(a.reason.strip() for a in starts_of(plan))


def _growth_and_stops(plan: Plan) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Per model: replicas started as growth, stopped by scale-down, and stopped as replaced."""
    starts: dict[str, int] = {}
    # A move's replacement (consolidation, defragmentation) starts beside the replica
    # it replaces, make-before-break: it is not growth past desired.
    moving = set(plan.moves.values())
    for a in starts_of(plan):
        if a.replica not in moving:
            starts[a.model] = starts.get(a.model, 0) + 1
    scale_downs: dict[str, int] = {}
    replaced_stops: dict[str, int] = {}
    for stop in stops_of(plan):
        if stop.preempted_for is not None or retired(stop):
            continue
        if stop.reason.startswith("consolidation:"):
            # A replica being replaced (see being_replaced), stopped once the others cover.
            replaced_stops[stop.model] = replaced_stops.get(stop.model, 0) + 1
        else:
            scale_downs[stop.model] = scale_downs.get(stop.model, 0) + 1
    return starts, scale_downs, replaced_stops


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
        if a.reason.startswith("scale down"):
            assert a.preempted_for is None
            by_model.setdefault(a.model, set()).add(a.replica)
    # Replicas that go whatever the demand (load-grace time-outs) or are replaced by a better
    # placement are not the
    # scale-down's to choose.
    gone = {
        a.replica
        for a in stops_of(plan)
        if retired(a) or a.reason.startswith(("consolidation:", "replaced"))
    }
    for name, ids in by_model.items():
        # Nor are replicas being replaced (kept until the others cover for them).
        gone |= being_replaced(snap, idx, idx.models[name], plan.models[name].desired)
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
