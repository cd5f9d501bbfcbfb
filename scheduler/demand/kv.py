"""The default demand source: what gateways write under `<prefix>demand/<model>`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from scheduler.core.models import Demand


class KVDemandSource:
    name = "consul"

    def read(
        self, models: list[str], kv_demand: Mapping[str, Demand], now: datetime
    ) -> dict[str, Demand]:
        # The values were read and validated with the rest of the catalog, in the same KV read.
        return dict(kv_demand)
