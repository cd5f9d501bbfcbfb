"""A core a newcomer can read (issue 15): no module of the decision core over 400 lines."""

from __future__ import annotations

from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "scheduler" / "core"
LIMIT = 400


def test_no_core_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted(CORE.glob("*.py"))}
    assert len(sizes) > 10, "the core was not found"
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
