"""Constraint operators and attribute units, without a server."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_scheduler_standins.nomad.attributes import from_attribute, parse_value
from llm_scheduler_standins.nomad.constraints import satisfies

MEMORY_80G = from_attribute({"Int": 81920, "Unit": "MiB"})


@pytest.mark.parametrize(
    ("left", "op", "right", "holds"),
    [
        (MEMORY_80G, ">=", "80 GiB", True),
        (MEMORY_80G, ">", "80GiB", False),
        (MEMORY_80G, ">=", "85 GB", True),  # 80 GiB is 85.9 GB
        (MEMORY_80G, "<", "0.1 TiB", True),
        (MEMORY_80G, "=", "81920 MiB", True),
        (MEMORY_80G, ">=", "2 GHz", False),  # different base: never comparable
        (MEMORY_80G, ">=", "1", False),  # unit vs no unit: not comparable
        (from_attribute({"Int": 700, "Unit": "W"}), ">", "0.5 kW", True),
        (from_attribute({"String": "550.54.15"}), "version", ">= 550.0, < 560", True),
        (from_attribute({"String": "535.1"}), "version", ">= 550.0", False),
        ("GPU-a,GPU-b,GPU-c", "set_contains", "GPU-a,GPU-c", True),
        ("GPU-a,GPU-b", "set_contains", "GPU-a,GPU-z", False),
        ("GPU-a,GPU-b", "set_contains_any", "GPU-z,GPU-b", True),
        ("gpu-h100-1", "regexp", "^gpu-h100", True),
        ("gpu-a100-1", "!=", "gpu-a100-1", False),
        (None, "is_not_set", "", True),
        (None, "=", "x", False),
        ("10", "<", "9", False),
    ],
)
def test_operators(left: object, op: str, right: str, holds: bool) -> None:
    assert satisfies(left, op, right) is holds  # type: ignore[arg-type]


def test_unknown_operator_never_holds() -> None:
    assert satisfies("a", "resembles", "a") is False


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 20), st.sampled_from(["MiB", "GiB", "KiB"]))
def test_units_compare_like_their_byte_counts(amount: int, unit: str) -> None:
    factor = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    attr = from_attribute({"Int": amount, "Unit": unit})
    same_in_bytes = f"{amount * factor} B"
    assert satisfies(attr, "=", same_in_bytes)
    assert satisfies(attr, "<", f"{amount * factor + 1} B")
    assert parse_value(f"{amount}{unit}").number == amount * factor
