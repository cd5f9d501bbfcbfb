"""Constraint operators as Nomad's feasibility checker applies them.

Left targets are resolved by the caller (node or device variables) into either a plain string
or, for device attributes, an attribute `Value` that knows its unit. `None` means "not set".
"""

from __future__ import annotations

import re
from typing import Any

from llm_scheduler_standins.nomad.attributes import Value, compare, parse_value

ORDERING = {
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}
EQUAL_OPS = {"=", "==", "is"}
NOT_EQUAL_OPS = {"!=", "not"}
KNOWN_OPERANDS = {
    *ORDERING,
    *EQUAL_OPS,
    *NOT_EQUAL_OPS,
    "regexp",
    "set_contains",
    "set_contains_all",
    "set_contains_any",
    "version",
    "semver",
    "is_set",
    "is_not_set",
    "distinct_hosts",
    "distinct_property",
}


def split_set(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def satisfies(left: str | Value | None, operand: str, right: str) -> bool:
    """Whether `left <operand> right` holds. Unknown operands never hold."""
    op = operand or "="
    if op == "is_set":
        return left is not None
    if op == "is_not_set":
        return left is None
    if left is None:
        return False
    if isinstance(left, Value):
        return _satisfies_value(left, op, right)
    return _satisfies_text(left, op, right)


def _satisfies_text(left: str, op: str, right: str) -> bool:
    if op in EQUAL_OPS:
        return left == right
    if op in NOT_EQUAL_OPS:
        return left != right
    if op == "regexp":
        try:
            return re.search(right, left) is not None
        except re.error:
            return False
    if op in ("set_contains", "set_contains_all"):
        return set(split_set(right)) <= set(split_set(left))
    if op == "set_contains_any":
        return bool(set(split_set(right)) & set(split_set(left)))
    if op in ORDERING:
        return _satisfies_value(parse_value(left), op, right)
    if op in ("version", "semver"):
        return _version_holds(left, right)
    return False


def _satisfies_value(left: Value, op: str, right: str) -> bool:
    if op in EQUAL_OPS | NOT_EQUAL_OPS | set(ORDERING):
        result = compare(left, parse_value(right))
        if result is None:
            return False
        if op in EQUAL_OPS:
            return result == 0
        if op in NOT_EQUAL_OPS:
            return result != 0
        return bool(ORDERING[op](result))
    text = left.text if left.text is not None else ""
    return _satisfies_text(text, op, right)


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = re.findall(r"\d+", text.split("-")[0].split("+")[0])
    return tuple(int(p) for p in parts) if parts else None


def _version_holds(left: str, right: str) -> bool:
    """Minimal version constraints: comma-separated `>= 1.2, < 2` terms."""
    have = _version_tuple(left)
    if have is None:
        return False
    for term in split_set(right):
        match = re.match(r"^(>=|<=|!=|>|<|=|~>)?\s*(.+)$", term)
        if not match:
            return False
        want = _version_tuple(match.group(2))
        if want is None:
            return False
        size = max(len(have), len(want))
        a = have + (0,) * (size - len(have))
        b = want + (0,) * (size - len(want))
        op = match.group(1) or "="
        if op == "~>":
            op = ">="
        if op in ORDERING and not ORDERING[op]((a > b) - (a < b)):
            return False
        if op == "=" and a != b:
            return False
        if op == "!=" and a == b:
            return False
    return True


def constraint_text(constraint: dict[str, Any]) -> str:
    """How Nomad names a constraint in ConstraintFiltered: `${node.unique.id} = abc`."""
    ltarget = constraint.get("LTarget") or ""
    operand = constraint.get("Operand") or "="
    rtarget = constraint.get("RTarget") or ""
    return f"{ltarget} {operand} {rtarget}".strip()
