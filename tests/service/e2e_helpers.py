"""End-to-end helpers: stand-ins over HTTP on loopback and a fast-ticking service."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import GPU, MigSlice, Node
from scheduler.service.config import ServiceConfig
from scheduler.service.loop import Service

LAYOUT = KVLayout()
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
# Every wait at zero, the scale-down window too: these tests drive single passes.
FAST_SETTINGS = {
    "eviction_grace_s": 0,
    "min_lifetime_s": 0,
    "preempt_hold_s": 0,
    "max_victims": 3,
    "scale_down_window_s": 0,
}


def small_fleet() -> list[Node]:
    def gpus(node: str, n: int, model: str = H100) -> list[GPU]:
        return [GPU(id=f"GPU-{node}-{i}", model=model, memory_gb=80) for i in range(n)]

    mig = GPU(
        id="GPU-m1-0",
        model=A100,
        memory_gb=80,
        mig=[
            MigSlice(id="MIG-m1-0-0", profile="3g.40gb", memory_gb=40),
            MigSlice(id="MIG-m1-0-1", profile="3g.40gb", memory_gb=40),
        ],
    )
    return [
        Node(id="node-h1", name="h1", cpu_cores=64, memory_gb=512, gpus=gpus("h1", 4)),
        Node(id="node-h2", name="h2", cpu_cores=64, memory_gb=512, gpus=gpus("h2", 4)),
        Node(id="node-m1", name="m1", cpu_cores=64, memory_gb=512, gpus=[mig]),
    ]


def wait_for(pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.03)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05) as dc:
        dc.consul.kv_put(LAYOUT.settings, json.dumps(FAST_SETTINGS))
        yield dc


@pytest.fixture
def service(cluster: DevCluster) -> Iterator[Service]:
    """One service on the stand-ins, holding the leader lock."""
    svc = start_leader(cluster)
    try:
        yield svc
    finally:
        svc.stop()


def start_leader(dc: DevCluster, **extra: Any) -> Service:
    """A service on the stand-ins, running in its thread, once it holds the leader lock."""
    svc = Service(service_config(dc, **extra))
    svc.run_in_thread()
    wait_for(lambda: svc.leader.is_leader, what="leadership")
    return svc


def service_config(dc: DevCluster, **extra: Any) -> ServiceConfig:
    values: dict[str, Any] = {
        "nomad_addr": dc.nomad_url,
        "consul_addr": dc.consul_url,
        "pass_interval_s": 0.5,
        "debounce_s": 0.02,
        "watch_wait_s": 2.0,
        "http_margin_s": 2.0,
        "backoff_min_s": 0.05,
        "backoff_max_s": 0.5,
        "session_ttl_s": 10,
        "lock_delay_s": 0,
    }
    values.update(extra)
    return ServiceConfig(**values)


def put(dc: DevCluster, key: str, value: Any) -> None:
    dc.consul.kv_put(key, value if isinstance(value, str | bytes) else json.dumps(value))


SERVE = {"source": "org/some-model", "runtime": "vllm"}


def model_value(profiles: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "owner": "org/a",
        "class": "standard",
        "scaling": {"min": 0, "max": 2, "target_per_replica": 10},
        "profiles": profiles,
        "serve": SERVE,
        **fields,
    }


def our_jobs(dc: DevCluster, model: str, live_only: bool = True) -> list[dict[str, Any]]:
    """Full jobs of `model` as the Nomad stand-in holds them (not yet stopped when live_only)."""
    out = []
    for job in dc.nomad.jobs():
        if (job.get("Meta") or {}).get("llm_scheduler_model") != model:
            continue
        if live_only and (job.get("Stop") or job.get("Status") == "dead"):
            continue
        out.append(job)
    return out


def status(dc: DevCluster, model: str) -> dict[str, Any] | None:
    raw = dc.consul.kv_get(LAYOUT.status_key(model))
    return json.loads(raw) if raw else None
