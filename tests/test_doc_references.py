"""References resolve inside this repository: the core cites the rules of docs/decision-core.md
by their ids, never a design file outside the repo; the docs a user reads link only to files
of the repository, restate what they need from outside, and keep no diary."""

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


# ---------------------------------------------------------------- the docs a user reads

USER_DOCS = [
    ROOT / "README.md",
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Files a user does not have: the design notes and the references the project was built from.
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|/work/|shared/(?:reference|fixtures)|preempt\.go")
# Measurement diaries and history belong in bench/README.md's current rows and in git.
DIARY = re.compile(
    r"\b[Ii]ssues? #?\d+|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|"
    r"tenth|eleventh|twelfth) session\b|session's start",
)


def test_the_user_docs_are_found() -> None:
    names = {p.name for p in USER_DOCS}
    assert {"README.md", "operating.md", "kv-reference.md", "model-fields.md", "tour.md"} <= names


def test_every_link_in_the_docs_resolves_inside_the_repository() -> None:
    broken = []
    for doc in USER_DOCS:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_docs_point_at_nothing_outside_the_repository() -> None:
    outside = [
        f"{doc.relative_to(ROOT)}:{n}: {line.strip()}"
        for doc in USER_DOCS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not outside, outside


def test_the_docs_keep_no_diary() -> None:
    diary = [
        f"{doc.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for doc in USER_DOCS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        if DIARY.search(line)
    ]
    assert not diary, diary


def test_the_patterns_catch_what_they_are_for() -> None:
    assert OUTSIDE.search("see DESIGN.md section 3") and OUTSIDE.search("../shared/fixtures")
    assert DIARY.search("Issue 15, twelfth session") and DIARY.search("(issue 18)")
    assert not DIARY.search("Consul invalidates the session") and not OUTSIDE.search("docs/a.md")
    assert LINK.findall("[a](docs/a.md) and [b](https://x.y)") == ["docs/a.md", "https://x.y"]
