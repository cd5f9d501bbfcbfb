"""Demand from vLLM's own metrics through the Prometheus HTTP API.

inflight = sum by model of `vllm:num_requests_running`, queued = of `vllm:num_requests_waiting`.
vLLM labels its metrics with `model_name` (the served model name, which the job template sets
to the catalog name). `last_used` is the last time this source saw a request for the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from scheduler.core.models import Demand
from scheduler.demand import DemandError

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


class PrometheusDemandSource:
    name = "prometheus"

    def __init__(self, url: str, *, label: str = "model_name", timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.label = label
        self._client = httpx.Client(timeout=timeout_s)
        self._last_used: dict[str, datetime] = {}

    def _query(self, metric: str) -> dict[str, float]:
        expr = f"sum by ({self.label}) ({metric})"
        try:
            resp = self._client.get(f"{self.url}/api/v1/query", params={"query": expr})
            body: Any = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise DemandError(f"prometheus {self.url}: {exc}") from exc
        if resp.status_code != 200 or body.get("status") != "success":
            raise DemandError(f"prometheus {self.url}: {resp.status_code} {str(body)[:200]}")
        out: dict[str, float] = {}
        for item in (body.get("data") or {}).get("result") or []:
            name = (item.get("metric") or {}).get(self.label)
            try:
                out[str(name)] = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out

    def read(
        self, models: list[str], kv_demand: Mapping[str, Demand], now: datetime
    ) -> dict[str, Demand]:
        running, waiting = self._query(RUNNING), self._query(WAITING)
        out: dict[str, Demand] = {}
        for name in models:
            inflight = max(round(running.get(name, 0)), 0)
            queued = max(round(waiting.get(name, 0)), 0)
            if inflight + queued > 0:
                self._last_used[name] = now
            last = self._last_used.get(name)
            if last is None and name in kv_demand:
                last = kv_demand[name].last_used
            out[name] = Demand(inflight=inflight, queued=queued, last_used=last)
        return out

    def close(self) -> None:
        self._client.close()
