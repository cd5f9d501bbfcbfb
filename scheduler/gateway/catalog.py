"""What the gateway reads of the catalog: model names, their hold bounds, their status.

Only the fields the gateway needs are read; the scheduler validates the rest. A bad bound is
reported (key and field) and the gateway-wide default used: the model stays routable.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from scheduler.core.contract_base import NAME_PATTERN, ActivationTimeout, MaxQueued
from scheduler.core.validate import format_validation_error


class _Bounds(BaseModel):
    model_config = ConfigDict(extra="ignore")
    activation_timeout_s: ActivationTimeout | None = None
    max_queued: MaxQueued | None = None


@dataclass(frozen=True)
class ModelEntry:
    name: str
    activation_timeout_s: float
    max_queued: int


def decode_value(entry: dict[str, Any]) -> Any:
    raw = entry.get("Value")
    if not raw:
        return None
    return json.loads(base64.b64decode(raw))


def read_models(
    entries: list[dict[str, Any]], prefix: str, timeout_s: float, max_queued: int
) -> tuple[dict[str, ModelEntry], list[str]]:
    """The catalog's models under `prefix` (`<kv prefix>models/`), and a line per bad value."""

    models: dict[str, ModelEntry] = {}
    problems: list[str] = []
    for entry in entries:
        key = str(entry.get("Key", ""))
        name = key[len(prefix) :]
        if not key.startswith(prefix) or not re.match(NAME_PATTERN, name):
            continue
        bounds = _Bounds()
        try:
            value = decode_value(entry)
            bounds = _Bounds.model_validate(value if isinstance(value, dict) else {})
        except ValidationError as err:  # before ValueError, which it is
            problems += format_validation_error(err, root=key)
        except (ValueError, TypeError):
            problems.append(f"{key}: not JSON; the gateway's default bounds apply")
        models[name] = ModelEntry(
            name=name,
            activation_timeout_s=float(bounds.activation_timeout_s or timeout_s),
            max_queued=max_queued if bounds.max_queued is None else bounds.max_queued,
        )
    return models, problems


def cannot_come(record: Any) -> str | None:
    """The scheduler's reason when its status record says the model cannot be placed for a
    reason that waiting will not clear: a quota limit on every profile (`quota_limit`), or no
    room where every filter that said no said it for good (`no_room`, each profile's `short`
    within its `unresolvable`: no stop or preemption changes it). None while it may still
    come. The record's shape: scheduler/adapters/status_writer.py."""
    if not isinstance(record, dict) or not record.get("pending"):
        return None
    if record.get("live") or record.get("replicas"):
        return None
    code, tried = record.get("pending_code"), record.get("tried")
    if code == "quota_limit":
        return str(record["pending"])
    if code != "no_room" or not isinstance(tried, list) or not tried:
        return None
    for trial in tried:
        short = trial.get("short") if isinstance(trial, dict) else None
        final = trial.get("unresolvable") if isinstance(trial, dict) else None
        if not isinstance(short, dict) or not short or not isinstance(final, list):
            return None
        if not set(short) <= set(final):
            return None
    return str(record["pending"])
