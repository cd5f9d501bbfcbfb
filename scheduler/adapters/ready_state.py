"""The time-to-ready state key (`state/time-to-ready`) as read from KV: the observed
start-to-ready means per model and warmth. Each bad part is one line naming the key and the
field, and is left out; the rest stands. The snapshot builder checks the key where it reads
the KV listing, so a bad value reaches status `_errors` and the input-error metrics as any
KV input does; the service reads the means back when it becomes leader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from scheduler.adapters.catalog import printable
from scheduler.adapters.json_bounds import bounded_loads

Warmth = Literal["warm", "cold"]
WARMTHS: tuple[Warmth, Warmth] = ("warm", "cold")
# A stored mean beyond a day is not a start time (a bad value, or a clock that jumped).
MAX_SECONDS = 86400.0
MAX_BYTES = 1 << 20
BAD_OBSERVED = "should be {mean_s: seconds from 0 to 86400, count: an integer >= 1}"


@dataclass(frozen=True)
class Observed:
    """The weighted mean of the observed start-to-ready times and how many there were."""

    mean_s: float
    count: int


def parse_observed(data: Any, key: str, problems: list[str]) -> dict[tuple[str, Warmth], Observed]:
    """The means the key's `models` holds; a line in `problems` for each bad part."""
    observed: dict[tuple[str, Warmth], Observed] = {}
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        problems.append(f"{key}: models: Input should be a JSON object")
        return observed
    for model, by_warmth in models.items():
        for warmth in WARMTHS:
            value = by_warmth.get(warmth) if isinstance(by_warmth, dict) else None
            if value is None and isinstance(by_warmth, dict):
                continue
            seen = _observed(value)
            if seen is None:
                where = f"{key}: models.{printable(str(model))}.{warmth}"
                problems.append(f"{where}: {BAD_OBSERVED}; left out")
                continue
            observed[(str(model), warmth)] = seen
    return observed


def _observed(value: Any) -> Observed | None:
    if not isinstance(value, dict):
        return None
    mean, count = value.get("mean_s"), value.get("count")
    if isinstance(mean, bool) or not isinstance(mean, int | float):
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return None
    if not (math.isfinite(mean) and 0 <= mean <= MAX_SECONDS):
        return None
    return Observed(float(mean), count)


def read_observed(
    raw: bytes | str | None, key: str, problems: list[str]
) -> dict[tuple[str, Warmth], Observed]:
    """The means of the key's raw value (none when it is empty or not JSON: one line)."""
    if not raw:
        return {}
    try:
        data = bounded_loads(raw, MAX_BYTES)
    except ValueError as exc:
        problems.append(f"{key}: {exc}")
        return {}
    return parse_observed(data, key, problems)


def time_to_ready_problems(entries: list[dict[str, Any]], key: str) -> list[str]:
    """The lines a KV listing's time-to-ready key gives (none when it is absent or good)."""
    problems: list[str] = []
    for entry in entries:
        if entry.get("Key") == key:
            read_observed(entry.get("Value"), key, problems)
    return problems
