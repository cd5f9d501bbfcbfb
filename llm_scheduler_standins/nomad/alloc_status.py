"""When an allocation is over for good."""

from __future__ import annotations

from typing import Any

TERMINAL_CLIENT = {"complete", "failed", "lost"}
ALLOC_NOT_NEEDED = "alloc not needed due to job update"


def is_terminal(alloc: dict[str, Any]) -> bool:
    return alloc["DesiredStatus"] in ("stop", "evict") or alloc["ClientStatus"] in TERMINAL_CLIENT
