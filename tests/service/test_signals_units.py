"""Adapter side: reading /metrics pages of both runtimes, percentiles over a window,
bad pages and readings reported by model and field, and the KV demand combined."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from llm_scheduler_standins.runner import serve_in_thread
from scheduler.core.models import Demand, Load
from scheduler.demand.metrics_text import MetricsError, bucket_delta, parse_metrics, quantile
from scheduler.demand.signals import ScrapeSignals, Signals, Target, combine

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} {a}
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} {b}
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} {c}
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} {c}
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} {c}
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.0
"""

SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 6.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.7
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 250.0
"""


def _vllm(a: float, b: float, c: float) -> str:
    return VLLM.replace("{a}", str(a)).replace("{b}", str(b)).replace("{c}", str(c))


def test_vllm_page_sums_engines_and_averages_kv() -> None:
    s = parse_metrics(_vllm(1, 2, 3))
    assert s.values == {"running": 5, "waiting": 4, "kv_cache": 0.4, "generation_tokens": 1000}
    assert s.histograms["ttft"] == {0.1: 1, 0.5: 2, 1.0: 3, math.inf: 3}
    assert not s.errors


def test_sglang_page() -> None:
    s = parse_metrics(SGLANG)
    assert s.values == {"running": 6, "waiting": 1, "kv_cache": 0.7, "gen_throughput": 250}


def test_quantile_as_prometheus_histogram_quantile() -> None:
    # 10 observations: 5 <= 0.1, 4 in (0.1, 0.5], 1 in (0.5, 1]: p90 is the top of (0.1, 0.5]
    buckets = {0.1: 5.0, 0.5: 9.0, 1.0: 10.0, math.inf: 10.0}
    assert quantile(0.9, buckets) == pytest.approx(0.5)
    assert quantile(0.5, buckets) == pytest.approx(0.1)
    assert quantile(0.9, {0.1: 0.0, math.inf: 0.0}) is None  # nothing observed
    assert quantile(0.9, {0.1: 1.0, math.inf: 10.0}) == 0.1  # in +Inf: the largest bound
    # over a window: only what the second scrape adds counts; a restarted server from zero
    assert bucket_delta({0.1: 7, math.inf: 9}, {0.1: 5, math.inf: 5}) == {0.1: 2, math.inf: 4}
    assert bucket_delta({0.1: 1, math.inf: 1}, {0.1: 5, math.inf: 5}) == {0.1: 1, math.inf: 1}


@pytest.mark.parametrize(
    "page", ["<html><body>502 Bad Gateway</body></html>", '{"status": "ok"}', "", "up 1\n"]
)
def test_a_page_that_is_not_model_metrics_is_an_error(page: str) -> None:
    with pytest.raises(MetricsError):
        parse_metrics(page)


def test_bad_readings_are_named_by_field_and_left_out() -> None:
    page = _vllm(1, 2, 3).replace(
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3',
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} NaN',
    )
    page += "# TYPE vllm:inter_token_latency_seconds histogram\n"
    page += 'vllm:inter_token_latency_seconds_count{model_name="m"} 3.0\n'
    page = page.replace('vllm:num_requests_waiting{engine="0",model_name="m"} 4.0',
                        'vllm:num_requests_waiting{engine="0",model_name="m"} +Inf')  # fmt: skip
    s = parse_metrics(page)
    assert "kv_cache" not in s.values and "waiting" not in s.values and "itl" not in s.histograms
    assert sorted(s.errors) == [
        "itl: histogram has no buckets",
        "kv_cache: nan reading",
        "waiting: inf reading",
    ]
    assert s.values["running"] == 5  # the rest goes on


def test_combine_larger_need_wins_and_latest_use() -> None:
    early, late = NOW.replace(hour=8), NOW.replace(hour=9)
    kv = {"a": Demand(inflight=10, queued=0, last_used=late), "b": Demand(inflight=1)}
    sig = Signals(
        load={"a": Load(running=4, waiting=6), "c": Load(running=2)},
        seen={"a": early, "c": early},
    )
    out = combine(kv, sig)
    assert out["a"] == Demand(inflight=10, queued=6, last_used=late)
    assert out["b"] == Demand(inflight=1)
    assert out["c"] == Demand(inflight=2, last_used=early)


PAGES: dict[str, str] = {}


async def metrics(request: Request) -> Response:
    page = PAGES.get(request.path_params["who"])
    if page is None:
        return PlainTextResponse("gone", status_code=503)
    return PlainTextResponse(page)


@pytest.fixture
def servers() -> Iterator[str]:
    server = serve_in_thread(Starlette(routes=[Route("/{who}/metrics", metrics)]), 0)
    yield server.url
    server.stop()
    PAGES.clear()


def test_scrape_aggregates_per_model_and_reports_bad_replicas(servers: str) -> None:
    PAGES.update({"a1": _vllm(0, 0, 0), "a2": SGLANG, "b1": "<html>oops</html>"})
    targets = {
        "m": [Target("m", "r1", "a1", f"{servers}/a1"), Target("m", "r2", "a2", f"{servers}/a2")],
        "n": [Target("n", "r3", "b1", f"{servers}/b1"), Target("n", "r4", "b2", f"{servers}/b2")],
    }
    src = ScrapeSignals(concurrency=2, timeout_s=2.0)
    first = src.read_signals(["m", "n", "idle"], targets, NOW)
    m = first.load["m"]
    assert (m.running, m.waiting, m.kv_cache, m.reporting, m.complete) == (11, 5, 0.55, 2, True)
    assert m.ttft_p90_ms is None  # one scrape is no window yet
    # model n: one page is not Prometheus text, one server answers 503: named, no scale-down
    assert first.load["n"] == Load(reporting=0, complete=False)
    assert any(e.startswith("model n, replica r3:") and "not Prometheus" in e for e in first.errors)
    assert any(e.startswith("model n, replica r4:") and "503" in e for e in first.errors)
    assert "idle" not in first.load
    PAGES["a1"] = _vllm(5, 9, 10)  # 10 requests got their first token since
    second = src.read_signals(["m"], targets, NOW)
    assert second.load["m"].ttft_p90_ms == pytest.approx(500)


def test_http_responses_with_length_or_chunks() -> None:
    from scheduler.demand.signals import _http_response

    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    assert _http_response(plain) == (200, "hello")
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"
    )
    assert _http_response(chunked) == (200, "hello")
    assert _http_response(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")[0] == 503
    with pytest.raises(ValueError):
        _http_response(b"garbage")


def test_an_oversized_page_is_refused(servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.demand import signals

    monkeypatch.setattr(signals, "MAX_PAGE_BYTES", 4096)
    PAGES["huge"] = SGLANG * 100
    targets = {"m": [Target("m", "r1", "h1", f"{servers}/huge")]}
    sig = ScrapeSignals().read_signals(["m"], targets, NOW)
    assert sig.load["m"] == Load(reporting=0, complete=False)
    assert any("larger than 4096 bytes" in e for e in sig.errors), sig.errors
