"""Device attributes with units, as the Nomad scheduler compares them.

An attribute is `{"Int": n, "Unit": "MiB"}`, `{"Float": x, "Unit": "W"}`, `{"String": s}` or
`{"Bool": b}`. Numbers compare across units of one base (Byte, Byte/s, Hz, W); a number with a
unit never compares with one without (Nomad's `Attribute.Comparable`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_BYTE_UNITS = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "PiB": 1 << 50,
    "EiB": 1 << 60,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "EB": 10**18,
}

UNITS: dict[str, tuple[str, float]] = {
    **{u: ("byte", float(m)) for u, m in _BYTE_UNITS.items()},
    **{f"{u}/s": ("byte/s", float(m)) for u, m in _BYTE_UNITS.items()},
    "Hz": ("hz", 1.0),
    "kHz": ("hz", 1e3),
    "MHz": ("hz", 1e6),
    "GHz": ("hz", 1e9),
    "mW": ("watt", 1e-3),
    "W": ("watt", 1.0),
    "kW": ("watt", 1e3),
    "MW": ("watt", 1e6),
    "GW": ("watt", 1e9),
}

_NUMBER_WITH_UNIT = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z/]*)\s*$")


@dataclass(frozen=True)
class Value:
    """A comparable value: a number in base units (with its base), or a string / bool."""

    number: float | None = None
    base: str | None = None
    text: str | None = None

    def comparable(self, other: Value) -> bool:
        if self.number is None or other.number is None:
            return self.text is not None and other.text is not None
        return self.base == other.base


def int_attr(value: int, unit: str = "") -> dict[str, Any]:
    return {"Int": value, "Unit": unit} if unit else {"Int": value}


def str_attr(value: str) -> dict[str, Any]:
    return {"String": value}


def from_attribute(attr: dict[str, Any]) -> Value:
    unit = attr.get("Unit") or ""
    for key in ("Int", "Float"):
        if attr.get(key) is not None:
            return _with_unit(float(attr[key]), unit)
    if attr.get("Bool") is not None:
        return Value(text=str(bool(attr["Bool"])).lower())
    return Value(text=str(attr.get("String", "")))


def parse_value(text: str) -> Value:
    """Parse a constraint's right-hand side: `40 GiB`, `3.5GiB`, `80`, or any string."""
    match = _NUMBER_WITH_UNIT.match(text)
    if match and (not match.group(2) or match.group(2) in UNITS):
        return _with_unit(float(match.group(1)), match.group(2))
    return Value(text=text)


def _with_unit(number: float, unit: str) -> Value:
    if not unit:
        return Value(number=number, base="", text=_plain(number))
    base, factor = UNITS.get(unit, (f"?{unit}", 1.0))
    return Value(number=number * factor, base=base)


def _plain(number: float) -> str:
    return str(int(number)) if number == int(number) else str(number)


def compare(left: Value, right: Value) -> int | None:
    """-1/0/1, or None when the two cannot be compared."""
    if not left.comparable(right):
        return None
    if left.number is not None and right.number is not None:
        return (left.number > right.number) - (left.number < right.number)
    lt, rt = left.text or "", right.text or ""
    return (lt > rt) - (lt < rt)
