"""Decode a KV value as JSON within bounds, before anything else looks at it.

Anyone with write access to a prefix can put anything there. Python's json module raises
RecursionError on deep nesting, turns `1e999` into infinity, accepts `NaN` and `Infinity`
(not JSON), and builds 400-digit integers that overflow float arithmetic later. Each of those
once crashed every pass. Here they become one error line naming the key and the field; the
caller freezes that key and goes on with the others.
"""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Any

MAX_DEPTH = 16  # a model is 4 deep; reports and state are 5
MAX_STRING = 4096  # characters in any one string (keys included)
MAX_INT = 10**15  # beyond any count, byte size or epoch-ms a value may carry
MAX_ITEMS = 4096  # entries in any one list or object


class BoundsError(ValueError):
    """A value outside the bounds; the message names the field (`scaling.min: ...`)."""


def _reject_constant(name: str) -> Any:
    raise BoundsError(f"{name} is not valid JSON (no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BoundsError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 16:  # decided on the digits: int() of a long string is slow
        raise BoundsError(f"integer {text[:20]}... is out of range (at most {MAX_INT:.0e})")
    value = int(text)
    if abs(value) > MAX_INT:
        raise BoundsError(f"integer {value} is out of range (at most {MAX_INT:.0e})")
    return value


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of [ and { outside strings, without recursion."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return 0  # cannot be deeper than the bound: skip the scan (the common case)
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _path(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out or "(the whole value)"


def _check_strings(value: Any) -> None:
    """Every string short and free of control characters; every container not too big."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_STRING:
                raise BoundsError(f"{_path(path)}: string of {len(item)} characters is too long")
            if any(ord(c) < 0x20 and c not in "\t\n\r" for c in item):
                raise BoundsError(f"{_path(path)}: string contains a control character")
        elif isinstance(item, dict):
            if len(item) > MAX_ITEMS:
                raise BoundsError(f"{_path(path)}: object has {len(item)} fields, too many")
            for k, v in item.items():
                if len(k) > MAX_STRING or any(ord(c) < 0x20 for c in k):
                    raise BoundsError(f"{_path(path)}: a field name is too long or not printable")
                stack.append((v, [*path, k]))
        elif isinstance(item, list):
            if len(item) > MAX_ITEMS:
                raise BoundsError(f"{_path(path)}: list has {len(item)} items, too many")
            stack.extend((v, [*path, i]) for i, v in enumerate(item))


class _Bad:
    """Stands in for an out-of-bounds number while looking for where it is."""


def _where_out_of_bounds(data: bytes) -> str:
    """The path of the first number that broke the bounds (decoded again, leniently)."""

    def constant(name: str) -> Any:
        return _Bad()

    def number(text: str) -> Any:
        try:
            return _finite_float(text) if any(c in text for c in ".eE") else _bounded_int(text)
        except BoundsError:
            return _Bad()

    try:
        value = json.loads(data, parse_constant=constant, parse_float=number, parse_int=number)
    except ValueError:
        return "(the whole value)"
    queue: deque[tuple[Any, list[str | int]]] = deque([(value, [])])
    while queue:
        item, path = queue.popleft()
        if isinstance(item, _Bad):
            return _path(path)
        if isinstance(item, dict):
            queue.extend((v, [*path, k]) for k, v in item.items())
        elif isinstance(item, list):
            queue.extend((v, [*path, i]) for i, v in enumerate(item))
    return "(the whole value)"


def bounded_loads(raw: bytes | str | None, max_bytes: int) -> Any:
    """The decoded value; BoundsError (a ValueError) with a sentence when it is out of bounds."""
    data = raw if isinstance(raw, bytes) else str(raw or "").encode()
    if len(data) > max_bytes:
        raise BoundsError(f"value is {len(data)} bytes, over the limit of {max_bytes}")
    if not data.strip():
        raise BoundsError("value is empty")
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise BoundsError(f"value is nested more than {MAX_DEPTH} deep")
    try:
        value = json.loads(
            data,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except BoundsError as exc:
        raise BoundsError(f"{_where_out_of_bounds(data)}: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BoundsError(f"not valid JSON: {exc}") from exc
    except (RecursionError, ValueError) as exc:  # belt and braces: never out of a pass
        raise BoundsError(f"not valid JSON: {type(exc).__name__}") from exc
    _check_strings(value)
    return value
