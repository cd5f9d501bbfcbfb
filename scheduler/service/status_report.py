"""What the leader writes after each pass: the scheduler's state key, one status record per
model, the general errors record; and which status records go (their model is gone)."""

from __future__ import annotations

from typing import Any

import structlog

from scheduler.adapters.catalog import GENERAL
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.snapshot_builder import ClusterView
from scheduler.adapters.status_writer import StatusWriter, status_record
from scheduler.core.models import Plan, Replica, rfc3339

log = structlog.get_logger("llm-scheduler.service")


def status_names(view: ClusterView, plan: Plan) -> set[str]:
    """Every model that gets a status record: in the catalog, in the plan, with an input error
    of its own, or with a replica left."""
    names = {m.name for m in view.snapshot.models} | set(plan.models)
    names |= {t for t in view.catalog.errors if t != GENERAL}
    names |= {r.model for r in view.snapshot.replicas}
    return names


def write_status(
    status: StatusWriter,
    layout: KVLayout,
    view: ClusterView,
    plan: Plan,
    names: set[str],
    preempted: dict[str, str],
    action_errors: dict[str, str],
) -> None:
    """The state the next pass reads goes first: whoever sees a status of this pass (a stopped
    roll-out, a move) finds the state that goes with it."""
    stamp = rfc3339(view.snapshot.now)
    status.write(layout.holds, _state(view, plan, preempted), stamp)
    by_model: dict[str, list[Replica]] = {}
    for rep in view.snapshot.replicas:
        by_model.setdefault(rep.model, []).append(rep)
    records = []
    for name in sorted(names):
        errors = view.catalog.errors.get(name, [])
        action_error = action_errors.get(name)
        last_error = "; ".join([*errors, *([action_error] if action_error else [])]) or None
        record = status_record(plan.models.get(name), by_model.get(name, []), last_error)
        records.append((layout.status_key(name), record))
    status.write_many(records, stamp)
    general = view.catalog.errors.get(GENERAL, []) + view.warnings
    status.write(
        layout.status_errors,
        {
            "errors": general,
            "last_error": general[-1] if general else None,
            "advice": list(plan.advice),
        },
        stamp,
    )
    _remove_retired(status, layout, view.kv_entries, names)


def _state(view: ClusterView, plan: Plan, preempted: dict[str, str]) -> dict[str, Any]:
    return {
        "holds": {k: v.model_dump(by_alias=True, mode="json") for k, v in plan.holds.items()},
        "preempted": preempted,
        "stalled": dict(plan.stalled),  # failed roll-outs
        "moves": dict(plan.moves),  # replicas being moved -> their replacements
        "gone": view.gone.to_json(),
    }


def _remove_retired(
    status: StatusWriter, layout: KVLayout, entries: list[dict[str, Any]], names: set[str]
) -> None:
    """A model with no key, no error and nothing left running: its record goes too."""
    for entry in entries:
        key = str(entry.get("Key", ""))
        if not key.startswith(layout.status) or key == layout.status_errors:
            continue
        name = key[len(layout.status) :]
        if name not in names and status.delete(key):
            log.info("status_removed", model=name, reason="retired: nothing of it is left")
