"""The Prometheus signal source against a tiny fake Prometheus HTTP API on loopback.

The fake answers each query the source sends by the metric names in it, so the test fails if
the source stops asking for either runtime's names (serving-runtimes.md section 6)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from llm_scheduler_standins.runner import serve_in_thread
from scheduler.core.decide import decide
from scheduler.core.models import Demand, Load, Model, Profile, Replica, Scaling, Snapshot
from scheduler.demand import DemandError
from scheduler.demand.prometheus import PrometheusDemandSource, PrometheusSignals

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
# query kind -> (names that must all be in the query, model -> value)
SERIES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "running": (
        ("vllm:num_requests_running", "sglang:num_running_reqs"),
        {"llama": "7", "small": "0", "qwen": "4"},
    ),
    "waiting": (("vllm:num_requests_waiting", "sglang:num_queue_reqs"), {"llama": "3"}),
    "kv": (("vllm:kv_cache_usage_perc", "sglang:token_usage"), {"llama": "0.41", "qwen": "0.9"}),
    "ttft": (
        (
            "histogram_quantile(0.9",
            "vllm:time_to_first_token_seconds_bucket",
            "sglang:time_to_first_token_seconds_bucket",
        ),
        {"llama": "0.84", "small": "NaN", "qwen": "+Inf"},
    ),
    "itl": (
        ("vllm:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_bucket"),
        {"llama": "0.03"},
    ),
    "tokens": (("vllm:generation_tokens_total", "sglang:gen_throughput"), {"llama": "120"}),
}


async def query(request: Request) -> JSONResponse:
    expr = request.query_params.get("query", "")
    kind = next((k for k, (names, _) in SERIES.items() if all(n in expr for n in names)), None)
    if kind is None or "by (model_name" not in expr:
        return JSONResponse({"status": "error", "error": f"bad query {expr}"}, status_code=400)
    result = [
        {"metric": {"model_name": name}, "value": [1700000000.0, value]}
        for name, value in SERIES[kind][1].items()
    ]
    return JSONResponse({"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = serve_in_thread(Starlette(routes=[Route("/api/v1/query", query)]), 0)
    yield server.url
    server.stop()


def test_signals_per_model_for_both_runtimes(prometheus: str) -> None:
    source = PrometheusSignals(prometheus)
    sig = source.read_signals(["llama", "small", "qwen", "absent"], {}, NOW)
    assert sig.load["llama"] == Load(
        running=7, waiting=3, kv_cache=0.41, ttft_p90_ms=840, itl_p90_ms=30, tokens_per_s=120
    )
    assert sig.load["small"].ttft_p90_ms is None  # no observations (NaN): no reading, no error
    assert "absent" not in sig.load  # no server reports it: no signal
    # +Inf is refused by model and field; the rest of qwen's reading stands, marked incomplete
    assert sig.load["qwen"].kv_cache == 0.9 and sig.load["qwen"].ttft_p90_ms is None
    assert not sig.load["qwen"].complete
    assert any(e.startswith("model qwen: ttft_p90_ms:") for e in sig.errors), sig.errors
    assert sig.seen == {"llama": NOW, "qwen": NOW}


def test_demand_combines_the_gateway_and_the_servers(prometheus: str) -> None:
    source = PrometheusDemandSource(prometheus)
    kv = {
        "llama": Demand(inflight=2, queued=9, last_used=NOW.replace(hour=9)),
        "small": Demand(inflight=5, last_used=NOW.replace(hour=8)),
    }
    demand = source.read(["llama", "small", "absent"], kv, NOW)
    assert demand["llama"] == Demand(inflight=7, queued=9, last_used=NOW)  # larger need wins
    assert demand["small"] == Demand(inflight=5, queued=0, last_used=NOW.replace(hour=8))
    assert demand["absent"] == Demand()
    later = NOW.replace(minute=5)
    SERIES["running"][1]["llama"] = "0"
    SERIES["waiting"][1]["llama"] = "0"
    try:
        again = source.read(["llama"], {}, later)
    finally:
        SERIES["running"][1]["llama"] = "7"
        SERIES["waiting"][1]["llama"] = "3"
    assert again["llama"].last_used == NOW  # idle since the last time it saw requests


def test_unreachable_prometheus_is_a_demand_error() -> None:
    source = PrometheusSignals("http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(DemandError):
        source.read_signals(["llama"], {}, NOW)


@pytest.mark.parametrize(
    ("kind", "value", "field"),
    [
        ("running", "NaN", "running"),
        ("kv", "NaN", "kv_cache"),
        ("ttft", "NaN", "ttft_p90_ms"),  # NaN while requests run: no quantile, not idle
        ("running", "+Inf", "running"),
    ],
)
def test_a_broken_reading_is_reported_and_holds_the_count(
    prometheus: str, kind: str, value: str, field: str
) -> None:
    SERIES[kind][1]["bent"] = value
    if kind != "running":
        SERIES["running"][1]["bent"] = "3"
    try:
        sig = PrometheusSignals(prometheus).read_signals(["bent"], {}, NOW)
    finally:
        SERIES[kind][1].pop("bent")
        SERIES["running"][1].pop("bent", None)
    assert [e for e in sig.errors if e.startswith(f"model bent: {field}: ")], sig.errors
    assert all("\n" not in e for e in sig.errors)
    assert not sig.load["bent"].complete  # the core never scales down on it

    model = Model(
        name="bent",
        owner="o",
        scaling=Scaling(min=1, max=4, target_per_replica=1, kv_cache_target=0.8),
        profiles=[Profile(name="p")],
    )
    replicas = [
        Replica(id=f"r{i}", model="bent", profile="p", state="running", created_at=NOW)
        for i in range(2)
    ]
    snap = Snapshot(now=NOW, models=[model], replicas=replicas, load=sig.load)
    assert decide(snap).models["bent"].desired == 2  # 2 stay: nothing scales down on it
