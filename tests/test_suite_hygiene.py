"""The suite itself: tests print nothing (no print() call; a string a subprocess runs may), the
service's log lines stay in pytest's capture (tests/conftest.py)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
import structlog

TESTS = Path(__file__).resolve().parent


def test_no_test_calls_print() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "disabled":
                found.append(f"{path.relative_to(TESTS)}:{node.lineno} (capsys.disabled)")
    assert found == []


def test_the_services_log_lines_go_where_pytest_captures_them() -> None:
    # structlog's default prints to the stdout of the moment: a service thread that outlives
    # its test printed to the terminal.
    assert isinstance(structlog.get_config()["logger_factory"], structlog.stdlib.LoggerFactory)
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger().handlers)


def test_slow_tests_are_marked_and_run_only_when_asked(pytestconfig: pytest.Config) -> None:
    assert any(m.startswith("slow:") for m in pytestconfig.getini("markers"))
    conftest = (TESTS / "conftest.py").read_text(encoding="utf-8")
    assert "LLM_SCHEDULER_SLOW_TESTS" in conftest
