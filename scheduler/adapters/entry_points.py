"""Loading one group of third-party plugins through Python entry points: a plugin that fails to
load is logged and skipped, never fatal."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import structlog

log = structlog.get_logger("llm-scheduler.plugins")


def load_group(group: str) -> dict[str, Any]:
    loaded: dict[str, Any] = {}
    for ep in entry_points(group=group):
        try:
            loaded[ep.name] = ep.load()
        except Exception as exc:  # a broken third-party plugin must not stop the service
            log.warning("plugin_load_failed", group=group, name=ep.name, error=str(exc))
    return loaded
