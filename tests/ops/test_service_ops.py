"""The real service on the stand-ins, watched through the ops observers and OTel spans."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scheduler.core.models import GPU, Node
from scheduler.ops.connect import consul_client
from scheduler.ops.dashboard import DashboardObserver
from scheduler.ops.metrics import MetricsObserver
from scheduler.ops.tracing import setup_tracing

pytest.importorskip("scheduler.core.decide", reason="the decision core is not in this tree yet")

PREFIX = "trace-test/"


def _small_fleet() -> list[Node]:
    gpus = [GPU(id=f"GPU-t{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80) for i in range(4)]
    return [Node(id="node-t1", name="gpu-t1", cpu_cores=64, memory_gb=512, gpus=gpus)]


def _wait(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    spans = InMemorySpanExporter()
    setup_tracing(processor=SimpleSpanProcessor(spans))
    return spans


@pytest.fixture
def running(
    exporter: InMemorySpanExporter,
) -> Iterator[tuple[Any, DashboardObserver, MetricsObserver]]:
    from llm_scheduler_standins.devcluster import DevCluster
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    with DevCluster(fleet=_small_fleet(), load_delay_s=0.1) as dev:
        kv = consul_client(dev.consul_url).kv
        settings = {"eviction_grace_s": 1, "min_lifetime_s": 0, "preempt_hold_s": 5}
        kv.put(PREFIX + "settings", json.dumps(settings))
        for name, cls in (("batch", "opportunistic"), ("chat", "critical")):
            minimum = 1 if name == "batch" else 0
            model = {"name": name, "owner": "org/a", "class": cls,
                     "scaling": {"min": minimum, "max": 1, "target_per_replica": 8},
                     "profiles": [{"name": "tp4", "gpus": 4}],
                     "serve": {"source": f"org/{name}"}}  # fmt: skip
            kv.put(PREFIX + "models/" + name, json.dumps(model))
        dash, metrics = DashboardObserver(), MetricsObserver()
        config = ServiceConfig(
            consul_addr=dev.consul_url, nomad_addr=dev.nomad_url, kv_prefix=PREFIX,
            pass_interval_s=0.5, debounce_s=0.05, watch_wait_s=2.0, session_ttl_s=10,
            lock_delay_s=0,
        )  # fmt: skip
        service = Service(config, observers=[dash, metrics])
        service.run_in_thread()
        try:
            yield kv, dash, metrics
        finally:
            service.stop()


def test_a_preemption_shows_in_spans_metrics_and_dashboard(
    running: tuple[Any, DashboardObserver, MetricsObserver], exporter: InMemorySpanExporter
) -> None:
    kv, dash, metrics = running

    def holders() -> set[str]:
        state = dash.state()
        return {g["holder"] for n in state["nodes"] for g in n["gpus"] if g["holder"]}

    _wait("batch to hold the GPUs", lambda: holders() == {"batch"})
    kv.put(PREFIX + "demand/chat", json.dumps({"inflight": 8, "queued": 0}))
    _wait("chat to take the GPUs", lambda: "chat" in holders(), timeout=40)

    spans = exporter.get_finished_spans()
    names = {s.name for s in spans}
    assert {"pass", "place", "preempt", "nomad.register", "nomad.deregister"} <= names
    preempt = next(s for s in spans if s.name == "preempt")
    assert preempt.attributes is not None
    assert preempt.attributes["model"] == "batch" and preempt.attributes["for"] == "chat"
    assert preempt.attributes["victims"]
    place = [
        s for s in spans if s.name == "place" and s.attributes and s.attributes["model"] == "chat"
    ]
    assert place and place[0].attributes and place[0].attributes["class"] == "critical"
    # Nomad calls are children of the decision they carry out, inside a pass.
    register = next(s for s in spans if s.name == "nomad.register")
    assert register.parent is not None
    by_id = {s.context.span_id: s for s in spans}
    assert by_id[register.parent.span_id].name == "place"

    state = dash.state()
    assert state["preemptions"][0]["victim"] == "batch"
    assert state["preemptions"][0]["victim_class"] == "opportunistic"
    text = metrics.exposition().decode()
    assert 'llm_scheduler_preemptions_total{class="opportunistic"} 1.0' in text
    assert 'llm_scheduler_gpus{state="free"} 0.0' in text
    assert "llm_scheduler_leader 1.0" in text
