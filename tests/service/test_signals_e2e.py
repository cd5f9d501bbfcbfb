"""End to end: the service scrapes the stand-in model servers the Nomad stand-in runs for
its allocations, through the real clients, and scales on what they report."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.service.loop import Service
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    service_config,
    small_fleet,
    status,
    wait_for,
)


@pytest.fixture
def served() -> Iterator[DevCluster]:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, model_servers=True) as dc:
        dc.consul.kv_put(LAYOUT.settings, json.dumps(FAST_SETTINGS))
        yield dc


def _service(dc: DevCluster) -> Service:
    svc = Service(service_config(dc, signals="scrape", signal_window_s=5.0))
    svc.run_in_thread()
    return svc


def _allocs(dc: DevCluster, model: str) -> list[dict]:
    out = []
    for job in our_jobs(dc, model):
        out += [a for a in dc.nomad.allocations(job["ID"]) if a["ClientStatus"] == "running"]
    return out


def test_a_running_allocation_serves_health_models_and_metrics(served: DevCluster) -> None:
    svc = _service(served)
    try:
        value = model_value([{"name": "one", "gpus": 1}], scaling={"min": 1, "max": 2})
        put(served, LAYOUT.model_key("chat"), value)
        [alloc] = wait_for(lambda: _allocs(served, "chat"), what="a running allocation")
        [port] = [p for p in alloc["AllocatedResources"]["Shared"]["Ports"] if p["Label"] == "http"]
        base = f"http://{port['HostIP']}:{port['Value']}"
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == "chat"
        page = httpx.get(f"{base}/metrics").text
        for name in (
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
            "vllm:time_to_first_token_seconds_bucket",
        ):
            assert name in page
    finally:
        svc.stop()


def test_a_broken_ttft_objective_scales_out_and_says_why(served: DevCluster) -> None:
    """One replica, a request target no load reaches, a 500 ms TTFT objective: the queue the
    offered load builds breaks the objective, and the service adds replicas for it."""
    scaling = {"min": 1, "max": 3, "target_per_replica": 1000, "ttft_p90_ms": 500}
    put(
        served, LAYOUT.model_key("chat"), model_value([{"name": "one", "gpus": 1}], scaling=scaling)
    )
    # Scaled out, the queue is gone and TTFT drops far below the objective: the window keeps
    # the replicas that did it (with no window they would go at once, and the queue come back).
    put(served, LAYOUT.settings, {**FAST_SETTINGS, "scale_down_window_s": 60})
    svc = _service(served)
    try:
        wait_for(lambda: len(_allocs(served, "chat")) == 1, what="the first replica")
        assert served.servers is not None
        served.servers.offer("chat", 16)  # capacity 8 per replica: 8 wait, ttft ~2 s
        wait_for(lambda: len(_allocs(served, "chat")) >= 2, timeout=30, what="a scale-out")
        why = wait_for(lambda: (status(served, "chat") or {}).get("why"), what="a why")
        assert "ttft p90" in why, why
        passes = svc.passes
        wait_for(lambda: svc.passes >= passes + 3, what="three more passes")
        assert len(our_jobs(served, "chat")) >= 2  # no flapping: it keeps them
    finally:
        svc.stop()


def test_a_replica_that_does_not_answer_keeps_the_count(served: DevCluster) -> None:
    """Missing metrics never scale down: with one server silenced, no demand at all and no
    window, the model keeps both replicas."""
    scaling = {"min": 0, "max": 2, "target_per_replica": 1}
    put(
        served, LAYOUT.model_key("chat"), model_value([{"name": "one", "gpus": 1}], scaling=scaling)
    )
    put(served, LAYOUT.demand_key("chat"), {"inflight": 2, "queued": 0})
    svc = _service(served)
    try:
        wait_for(lambda: len(_allocs(served, "chat")) == 2, what="two replicas")
        wait_for(lambda: svc.builder.last_signals.load.get("chat"), what="a reading")
        assert served.servers is not None
        served.servers.stop(_allocs(served, "chat")[0]["ID"])  # it stops answering
        put(served, LAYOUT.demand_key("chat"), {"inflight": 0, "queued": 0})
        wait_for(
            lambda: any("chat" in e and "scrape" in e for e in svc.builder.last_signals.errors),
            what="the scrape error",
        )
        svc.trigger()

        def incomplete() -> bool:
            plan = svc.last_plan
            return plan is not None and "metrics incomplete" in str(plan.models["chat"].why)

        wait_for(incomplete, what="the incomplete reading")
        assert len(our_jobs(served, "chat")) == 2
    finally:
        svc.stop()


def test_a_bad_policy_value_is_named_and_the_model_keeps_its_count(served: DevCluster) -> None:
    """kv_cache_target 1.5, a negative objective, an unknown signal: each named by model and
    field in its status; the model keeps its replicas (its last good value stands), the others
    go on."""
    scaling = {"min": 1, "max": 2, "target_per_replica": 10}
    put(
        served, LAYOUT.model_key("chat"), model_value([{"name": "one", "gpus": 1}], scaling=scaling)
    )
    svc = _service(served)
    try:
        wait_for(lambda: len(_allocs(served, "chat")) == 1, what="the first replica")
        for bad, field in [
            ({"kv_cache_target": 1.5}, "scaling.kv_cache_target"),
            ({"ttft_p90_ms": -5}, "scaling.ttft_p90_ms"),
            ({"latency_p99_ms": 100}, "scaling.latency_p99_ms"),
        ]:
            value = model_value([{"name": "one", "gpus": 1}], scaling={**scaling, **bad})
            put(served, LAYOUT.model_key("chat"), value)
            other = model_value([{"name": "one", "gpus": 1}], scaling={"min": 1, "max": 1})
            put(served, LAYOUT.model_key("other"), other)

            def named(f: str = field) -> bool:
                return f in str((status(served, "chat") or {}).get("last_error"))

            wait_for(named, what=f"the error naming {field}")
            assert len(our_jobs(served, "chat")) == 1  # kept
        wait_for(lambda: len(_allocs(served, "other")) == 1, what="the other model placed")
    finally:
        svc.stop()


def test_a_prometheus_outage_acts_on_nothing(served: DevCluster) -> None:
    """An unreachable Prometheus is a failed read, as an unreachable Consul: no start, no stop,
    the error counted; the replicas stay as they were."""
    put(served, LAYOUT.model_key("chat"), model_value([{"name": "one", "gpus": 1}]))
    put(served, LAYOUT.demand_key("chat"), {"inflight": 5})
    svc = Service(service_config(served, signals="prometheus", prometheus_url="http://127.0.0.1:9"))
    svc.run_in_thread()
    try:
        wait_for(lambda: svc.last_read_error, what="the failed read")
        assert "prometheus" in str(svc.last_read_error)
        assert our_jobs(served, "chat") == [] and svc.last_plan is None
    finally:
        svc.stop()
