"""Loads the documented Consul examples in /work/shared/fixtures/consul."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path("/work/shared/fixtures/consul")


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())
