"""What the leader writes after each pass: the scheduler's state key, one status record per
model, the general errors record; and which status records go (their model is gone).

Writing gets its own input (StatusInput), taken from the pass's view once, and the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from scheduler.adapters.catalog import GENERAL
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.pass_memory import Gone
from scheduler.adapters.snapshot_builder import ClusterView
from scheduler.adapters.status_writer import StatusWriter, prefetch_record, status_record
from scheduler.adapters.usage_state import UsageRead, usage_record
from scheduler.core.models import Plan, Replica, rfc3339

log = structlog.get_logger("llm-scheduler.service")


@dataclass(frozen=True)
class StatusInput:
    """What one pass's status records are made of, besides its plan."""

    now: datetime
    models: frozenset[str]  # the catalog's models
    errors: dict[str, list[str]]  # input errors by model, or GENERAL
    warnings: list[str]  # what else the read found wrong (health unreadable, signals, ...)
    replicas: list[Replica]
    gone: Gone  # what went missing and since when, for the state key
    present: list[str]  # status keys as read: a model's record goes once the model does
    node_names: dict[str, str]  # node id -> name, written beside each replica's node ids
    usage: UsageRead  # the usage key as read (rule F4)
    usage_on: bool  # settings.usage_half_life_s is set: the plan's usage is kept


def status_input(view: ClusterView, layout: KVLayout) -> StatusInput:
    snapshot = view.snapshot
    return StatusInput(
        now=snapshot.now,
        models=frozenset(m.name for m in snapshot.models),
        errors=view.catalog.errors,
        warnings=view.warnings,
        replicas=snapshot.replicas,
        gone=view.gone,
        node_names={n.id: n.name for n in snapshot.nodes},
        usage=view.usage,
        usage_on=snapshot.settings.usage_half_life_s > 0,
        present=[
            key
            for e in view.own_entries
            if (key := str(e.get("Key", ""))).startswith(layout.status)
        ],
    )


def status_names(given: StatusInput, plan: Plan) -> set[str]:
    """Every model that gets a status record: in the catalog, in the plan, with an input error
    of its own, or with a replica left."""
    names = set(given.models) | set(plan.models)
    names |= {t for t in given.errors if t != GENERAL}
    names |= {r.model for r in given.replicas}
    return names


def write_status(
    status: StatusWriter,
    layout: KVLayout,
    given: StatusInput,
    plan: Plan,
    names: set[str],
    preempted: dict[str, str],
    action_errors: dict[str, str],
    prefetch_errors: dict[str, str] | None = None,
) -> None:
    """The state the next pass reads goes first: whoever sees a status of this pass (a stopped
    roll-out, a move) finds the state that goes with it."""
    stamp = rfc3339(given.now)
    status.write(layout.holds, _state(given, plan, preempted), stamp)
    kept = usage_record(plan.usage, given.usage) if given.usage_on else None
    if kept is not None:  # off, or a value that is not ours to write over: left as it is
        status.write(layout.usage, kept, stamp)
    by_model: dict[str, list[Replica]] = {}
    for rep in given.replicas:
        by_model.setdefault(rep.model, []).append(rep)
    records = []
    for name in sorted(names):
        errors = given.errors.get(name, [])
        action_error = action_errors.get(name)
        last_error = "; ".join([*errors, *([action_error] if action_error else [])]) or None
        record = status_record(
            plan.models.get(name), by_model.get(name, []), last_error, given.node_names
        )
        prefetching = plan.prefetch.get(name)
        if prefetching is not None:
            error = (prefetch_errors or {}).get(name)
            record["prefetch"] = prefetch_record(prefetching, error, given.node_names)
        records.append((layout.status_key(name), record))
    status.write_many(records, stamp)
    general = given.errors.get(GENERAL, []) + given.warnings
    status.write(
        layout.status_errors,
        {
            "errors": general,
            "last_error": general[-1] if general else None,
            "advice": list(plan.advice),
        },
        stamp,
    )
    _remove_retired(status, layout, given.present, names)


def _state(given: StatusInput, plan: Plan, preempted: dict[str, str]) -> dict[str, Any]:
    return {
        "holds": {k: v.model_dump(by_alias=True, mode="json") for k, v in plan.holds.items()},
        # Room kept for models that preempted for it (rule R5).
        "reservations": {
            k: [r.model_dump(mode="json") for r in v] for k, v in plan.reservations.items()
        },
        "preempted": preempted,
        "stalled": dict(plan.stalled),  # failed roll-outs
        "moves": dict(plan.moves),  # replicas being moved -> their replacements
        "gone": given.gone.to_json(),
    }


def _remove_retired(
    status: StatusWriter, layout: KVLayout, present: list[str], names: set[str]
) -> None:
    """A model with no key, no error and nothing left running: its record goes too."""
    for key in present:
        if key == layout.status_errors:
            continue
        name = key[len(layout.status) :]
        if name not in names and status.delete(key):
            log.info("status_removed", model=name, reason="retired: nothing of it is left")
