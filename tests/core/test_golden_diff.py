"""golden_diff names the first pass whose plan changed and what changed in it."""

from __future__ import annotations

import copy

from golden_diff import describe
from golden_plans import digest, load


def test_a_dropped_start_is_named_at_its_pass() -> None:
    old = load()["scenarios"][0]["whole"]
    at = next(i for i, plan in enumerate(old) if plan["actions"])
    new = copy.deepcopy(old)
    dropped = new[at]["actions"].pop(0)
    new[-1]["holds"] = {"m9": {"until": "2026-12-02T10:05:00Z", "for": "m1"}}
    lines = describe("scenario 0", old, new, digest(old))
    assert lines[1] == f"  first differing pass: {at} (and 1 later ones differ)"
    assert lines[2].startswith(f"  - start {dropped['model']}/{dropped['profile']} on ")
    assert len(lines) == 3
    assert "another core" in describe("scenario 0", old, new, "0" * 16)[0]


def test_a_change_the_lines_do_not_show_is_named_by_its_path() -> None:
    old = load()["scenarios"][0]["whole"]
    new = copy.deepcopy(old)
    new[0]["models"]["m0"]["tried"] = []
    lines = describe("scenario 0", old, new, digest(old))
    assert lines[2] == "  ~ .models.m0.tried"
