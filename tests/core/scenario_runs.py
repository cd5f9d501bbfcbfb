"""Running a generated scenario: pass after pass, stops taking one pass or none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from hypothesis import note
from scenario_gen import Scenario, ts

from scheduler.core.decide import decide
from scheduler.core.models import (
    Plan,
    Replica,
    Snapshot,
    StartAction,
    StopAction,
)
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import parse_snapshot

# ---------------------------------------------------------------- running passes


def apply_slow(snap: Snapshot, plan: Plan, advance_s: float) -> Snapshot:
    """Like apply_plan, but a stop takes one pass: the replica is `stopping` in between."""
    stops: dict[str, StopAction] = {}
    for a in stops_of(plan):  # a replica stopped twice keeps the preemption mark
        if a.replica not in stops or a.preempted_for is not None:
            stops[a.replica] = a
    replicas: list[Replica] = []
    for r in snap.replicas:
        if r.state == "stopping":
            continue  # Nomad reported it gone
        stop = stops.get(r.id)
        if stop is not None:
            r = r.model_copy(update={"state": "stopping", "preempted_for": stop.preempted_for})
        replicas.append(r)
    started = apply_plan(snap.model_copy(update={"replicas": []}), plan, advance_s)
    return started.model_copy(update={"replicas": replicas + started.replicas})


def step(snap: Snapshot, plan: Plan, advance_s: float, slow: bool) -> Snapshot:
    return apply_slow(snap, plan, advance_s) if slow else apply_plan(snap, plan, advance_s)


def with_demand(snap: Snapshot, demand: dict[str, Any]) -> Snapshot:
    return parse_snapshot({**dump(snap), "demand": demand})


def dump(snap: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(snap.model_dump_json(by_alias=True))
    return data


def operator_changes(snap: Snapshot, scn: Scenario) -> Snapshot:
    data = dump(snap)
    sick = set(scn.sick)
    for node in data["nodes"]:
        if node["id"] in scn.drained:
            node["eligible"] = False
        for gpu in node["gpus"]:
            gpu["healthy"] = gpu["healthy"] and gpu["id"] not in sick
            for sl in gpu["mig"] or []:
                sl["healthy"] = sl["healthy"] and sl["id"] not in sick
    if scn.final_quotas is not None:
        data["quotas"] = scn.final_quotas
    if scn.final_settings is not None:
        data["settings"] = scn.final_settings
    if scn.final_demand is not None:
        data["demand"] = scn.final_demand
    now = snap.now
    newest = max((r["created_at"] for r in data["replicas"]), default=None)
    for i, rep in enumerate(data["replicas"]):
        if scn.last_used_ago:
            ago = scn.last_used_ago[i % len(scn.last_used_ago)]
            rep["last_used_at"] = None if ago is None else ts(now - timedelta(seconds=ago))
        if scn.not_ready and rep["state"] == "running" and rep["created_at"] == newest:
            rep["state"], rep["ready_at"] = "starting", None
    return parse_snapshot(data)


def history(scn: Scenario) -> Iterator[tuple[Snapshot, Plan]]:
    """Every (snapshot, plan) of the history, then of the final pass after operator changes."""
    snap = parse_snapshot({**scn.base, "replicas": []})
    for demand, advance in scn.passes:
        snap = with_demand(snap, demand)
        plan = decide(snap)
        yield snap, plan
        snap = step(snap, plan, advance, scn.slow_stops)
    final = operator_changes(snap, scn)
    yield final, decide(final)


def passes(scn: Scenario) -> Iterator[tuple[Snapshot, Plan]]:
    """history(scn), the final snapshot noted for hypothesis' report of a failure."""
    runs = history(scn)
    last = next(runs)
    for run in runs:
        yield last
        last = run
    note(json.dumps(dump(last[0])))
    yield last


def starts_of(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


def stops_of(plan: Plan) -> list[StopAction]:
    return [a for a in plan.actions if isinstance(a, StopAction)]
