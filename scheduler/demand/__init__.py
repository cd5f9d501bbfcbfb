"""Demand sources: where per-model inflight/queued numbers come from (Consul KV or metrics).

A source is any object with `name` and `read(models, kv_demand, now)`; third parties register a
factory `(config) -> DemandSource` under the `llm_scheduler.demand_sources` entry point group.
A source that cannot answer raises DemandError, and the pass then does nothing destructive.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from scheduler.core.models import Demand


class DemandError(Exception):
    """The demand source could not be read."""


class DemandSource(Protocol):
    name: str

    def read(
        self, models: list[str], kv_demand: Mapping[str, Demand], now: datetime
    ) -> dict[str, Demand]: ...
