"""structlog setup: one JSON (or console) line per event."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "console", level: int = logging.INFO) -> None:
    # JSON: the exception goes whole into the line (type, message, frames) as `exception`;
    # the console renderer prints the traceback itself.
    tail: list[structlog.types.Processor] = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
        if fmt == "json"
        else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
