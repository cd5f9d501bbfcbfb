"""Compare a stand-in's JSON answer with a documented example by shape, not by value.

Used by the stand-in conformance tests: every key the documentation shows must be present
(extra keys are allowed, real servers add fields over versions) and every value must have
the documented JSON type, recursively. Lists are compared element-wise against the first
documented element, so a documented `[{...}]` constrains every element of the actual list.
"""

from __future__ import annotations

from typing import Any

# JSON types as they come out of json.loads; bool is checked before int because
# bool is a subclass of int in Python.
_JSON_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "number"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)


class ShapeMismatch(AssertionError):
    """A value differs in shape from the documented example; the message names the path."""


def json_type(value: Any) -> str:
    for python_type, name in _JSON_TYPE_NAMES:
        if isinstance(value, python_type):
            return name
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def shape_mismatches(
    actual: Any, documented: Any, path: str = "$", *, null_matches_any: bool = False
) -> list[str]:
    """Every difference in shape between `actual` and `documented`, as `path: reason` lines.

    A documented `null` only says "this field exists", so by default it matches only null;
    pass `null_matches_any=True` to let a documented null accept any actual type (useful
    where the docs show `null` for a field that is often filled, like a KV Value).
    """
    documented_type = json_type(documented)
    actual_type = json_type(actual)
    if documented_type == "null" and null_matches_any:
        return []
    if actual_type != documented_type:
        return [f"{path}: expected {documented_type}, got {actual_type} ({actual!r:.80})"]
    if documented_type == "object":
        problems: list[str] = []
        for key, documented_value in documented.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing (present keys: {sorted(actual)})")
                continue
            problems.extend(
                shape_mismatches(
                    actual[key],
                    documented_value,
                    f"{path}.{key}",
                    null_matches_any=null_matches_any,
                )
            )
        return problems
    if documented_type == "array" and documented:
        problems = []
        for position, element in enumerate(actual):
            problems.extend(
                shape_mismatches(
                    element, documented[0], f"{path}[{position}]", null_matches_any=null_matches_any
                )
            )
        return problems
    return []


def assert_same_shape(
    actual: Any, documented: Any, path: str = "$", *, null_matches_any: bool = False
) -> None:
    """Raise ShapeMismatch listing every path where `actual` differs in shape from `documented`."""
    problems = shape_mismatches(actual, documented, path, null_matches_any=null_matches_any)
    if problems:
        raise ShapeMismatch("shape differs from documented example:\n  " + "\n  ".join(problems))
