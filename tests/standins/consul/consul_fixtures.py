"""Loads the documented Consul examples in /work/shared/fixtures/consul."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# shared/ lies beside the checkout (CI lays a copy there); /work/shared is the workplace mount.
FIXTURES = next(
    (
        p
        for p in (
            Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "consul",
            Path("/work/shared/fixtures/consul"),
        )
        if p.exists()
    ),
    Path("/work/shared/fixtures/consul"),
)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())
