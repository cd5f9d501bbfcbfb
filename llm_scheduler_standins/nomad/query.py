"""Query parameters as Nomad parses them: Go bools and durations, blocking index/wait, filters."""

from __future__ import annotations

import re
from typing import Any

DEFAULT_WAIT_S = 300.0
MAX_WAIT_S = 600.0
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class BadQuery(ValueError):
    """Answered 400 with the message as plain text."""


def parse_bool(params: Any, name: str, default: bool = False) -> bool:
    """strconv.ParseBool, which is what accepts python-nomad's `True`/`False`."""
    raw = params.get(name)
    if raw is None:
        return default
    if raw == "":
        return True  # Nomad treats a bare `?resources` as set
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise BadQuery(f'Failed to parse value of "{name}" ({raw}) as a bool')


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration for the forms people use: 5m, 10s, 1m30s, 250ms, 0."""
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            raise ValueError(text)
        total += float(match.group(1)) * _SCALE[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(text)
    return total


def blocking_params(params: Any) -> tuple[int, float]:
    """(min index, wait seconds); a zero index means: answer at once."""
    raw_index = params.get("index")
    index = 0
    if raw_index not in (None, ""):
        try:
            index = int(raw_index)
        except ValueError as exc:
            raise BadQuery("Invalid index") from exc
        if index < 0:
            raise BadQuery("Invalid index")
    wait = DEFAULT_WAIT_S
    raw_wait = params.get("wait")
    if raw_wait not in (None, ""):
        try:
            wait = parse_duration(raw_wait)
        except ValueError as exc:
            raise BadQuery("Invalid wait time") from exc
    return index, min(wait, MAX_WAIT_S)


_TERM = re.compile(
    r"^\s*(?P<sel>[A-Za-z_][\w.]*)\s*(?P<op>==|!=|contains|not contains|matches)\s*"
    r'"(?P<val>(?:[^"\\]|\\.)*)"\s*$'
    r'|^\s*"(?P<val2>(?:[^"\\]|\\.)*)"\s+(?P<op2>in|not in)\s+(?P<sel2>[A-Za-z_][\w.]*)\s*$'
    r"|^\s*(?P<sel3>[A-Za-z_][\w.]*)\s+(?P<op3>is empty|is not empty)\s*$"
)


def _select(item: Any, selector: str) -> Any:
    for part in selector.split("."):
        if not isinstance(item, dict):
            return None
        item = item.get(part)
    return item


def compile_filter(expression: str | None) -> Any:
    """A minimal go-bexpr: terms joined by `and` / `or` (no parentheses)."""
    if not expression:
        return lambda item: True
    alternatives = []
    for alt in re.split(r"\s+or\s+", expression):
        terms = []
        for term in re.split(r"\s+and\s+", alt):
            match = _TERM.match(term)
            if not match:
                raise BadQuery(f"failed to read filter expression: unsupported term {term!r}")
            terms.append(match.groupdict())
        alternatives.append(terms)

    def _term_holds(item: Any, t: dict[str, Any]) -> bool:
        if t["sel"]:
            value, want = _select(item, t["sel"]), t["val"]
            if t["op"] == "==":
                return (
                    str(value).lower() == want.lower()
                    if isinstance(value, bool)
                    else (value == want or str(value) == want)
                )
            if t["op"] == "!=":
                return not (value == want or str(value) == want)
            if t["op"] in ("contains", "not contains"):
                present = want in (value or [])
                return present if t["op"] == "contains" else not present
            return bool(re.search(want, str(value or "")))
        if t["sel2"]:
            container = _select(item, t["sel2"]) or {}
            present = t["val2"] in container
            return present if t["op2"] == "in" else not present
        empty = not _select(item, t["sel3"])
        return empty if t["op3"] == "is empty" else not empty

    return lambda item: any(all(_term_holds(item, t) for t in alt) for alt in alternatives)
