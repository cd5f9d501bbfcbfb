"""Tests print nothing: the service's log lines go through stdlib logging, which pytest
captures per test (shown with a failure) and which has nowhere to print between tests.

Tests marked `slow` (long property hunts, instruction counts) run only when asked:
LLM_SCHEDULER_SLOW_TESTS=1 (the suite stays under 10 minutes on a loaded 2-core machine)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
import structlog


def _quiet_logs() -> None:
    # A root handler of its own keeps logging's last resort (print to stderr) out of it, for
    # the service threads that log after their test ended.
    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def pytest_configure(config: pytest.Config) -> None:
    _quiet_logs()


@pytest.fixture(autouse=True)
def _logs_stay_quiet() -> Iterator[None]:
    _quiet_logs()  # a test that configured logging itself (JSON to a buffer) is undone
    yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("LLM_SCHEDULER_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set LLM_SCHEDULER_SLOW_TESTS=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
