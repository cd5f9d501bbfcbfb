"""HCL2 jobspecs to API JSON (placeholder until the parser lands)."""

from __future__ import annotations

from typing import Any


class HclError(ValueError):
    pass


def parse_job(
    text: str, *, variables: str = "", canonicalize: bool = False, region: str = "global"
) -> dict[str, Any]:
    raise HclError("HCL parsing is not implemented yet")
