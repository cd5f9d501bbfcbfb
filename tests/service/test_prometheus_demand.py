"""The Prometheus demand source against a tiny fake Prometheus HTTP API on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from scheduler.core.models import Demand
from scheduler.demand import DemandError
from scheduler.demand.prometheus import PrometheusDemandSource
from scheduler.standins.runner import serve_in_thread

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
SERIES = {
    "vllm:num_requests_running": {"llama": "7", "small": "0"},
    "vllm:num_requests_waiting": {"llama": "3"},
}


async def query(request: Request) -> JSONResponse:
    expr = request.query_params.get("query", "")
    metric = next((m for m in SERIES if m in expr), None)
    if metric is None or "sum by (model_name)" not in expr:
        return JSONResponse({"status": "error", "error": "bad query"}, status_code=400)
    result = [
        {"metric": {"model_name": name}, "value": [1700000000.0, value]}
        for name, value in SERIES[metric].items()
    ]
    return JSONResponse({"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = serve_in_thread(Starlette(routes=[Route("/api/v1/query", query)]), 0)
    yield server.url
    server.stop()


def test_reads_running_and_waiting_per_model(prometheus: str) -> None:
    source = PrometheusDemandSource(prometheus)
    demand = source.read(["llama", "small", "absent"], {}, NOW)
    assert demand["llama"] == Demand(inflight=7, queued=3, last_used=NOW)
    assert demand["small"] == Demand(inflight=0, queued=0, last_used=None)
    assert demand["absent"].inflight == 0
    later = NOW.replace(minute=5)
    SERIES["vllm:num_requests_running"]["llama"] = "0"
    SERIES["vllm:num_requests_waiting"]["llama"] = "0"
    try:
        again = source.read(["llama"], {}, later)
    finally:
        SERIES["vllm:num_requests_running"]["llama"] = "7"
        SERIES["vllm:num_requests_waiting"]["llama"] = "3"
    assert again["llama"].last_used == NOW  # idle since the last time it saw requests


def test_unreachable_prometheus_is_a_demand_error() -> None:
    source = PrometheusDemandSource("http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(DemandError):
        source.read(["llama"], {}, NOW)
