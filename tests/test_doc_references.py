"""References from the code to the docs resolve inside this repository (issue 15): the core
cites the rules of docs/decision-core.md by their ids, never a design file outside the repo."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "scheduler" / "core"
DOC = ROOT / "docs" / "decision-core.md"

RULE_ID = re.compile(r"\*\*([A-Z]\d+)\*\*")
CITED = re.compile(r"\brules? ([A-Z]\d+)(?:-([A-Z]\d+))?")


def _sources() -> list[Path]:
    return sorted((ROOT / "scheduler").rglob("*.py"))


def test_the_rules_are_numbered_in_the_decision_core_doc() -> None:
    ids = RULE_ID.findall(DOC.read_text())
    assert len(ids) == len(set(ids)), "a rule id is used twice"
    for family in ("S", "P", "F", "R", "L"):
        assert f"{family}1" in ids


def test_every_rule_the_code_cites_is_in_the_doc() -> None:
    ids = set(RULE_ID.findall(DOC.read_text()))
    cited: dict[str, str] = {}
    for path in _sources():
        for first, last in CITED.findall(path.read_text()):
            for rule in (first, last):
                if rule:
                    cited[rule] = str(path.relative_to(ROOT))
    assert cited, "the core cites no rule at all: the pattern is wrong"
    missing = {rule: where for rule, where in cited.items() if rule not in ids}
    assert not missing, f"cited but not in docs/decision-core.md: {missing}"


def test_the_core_cites_nothing_outside_the_repository() -> None:
    outside = [
        str(p.relative_to(ROOT))
        for p in sorted(CORE.rglob("*.py"))
        if "DESIGN.md" in p.read_text() or "preempt.go" in p.read_text()
    ]
    assert not outside, f"core modules citing files outside the repo: {outside}"


def test_every_doc_the_code_names_exists() -> None:
    named = {
        m
        for p in _sources()
        for m in re.findall(r"(?<![\w/])docs/[\w./-]+\.md(?!x)", p.read_text())
    }
    assert named, "no docs/ reference found: the pattern is wrong"
    assert not [n for n in named if not (ROOT / n).is_file()]
