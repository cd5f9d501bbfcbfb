"""The service's own passes, for bench/pass_time.py: a quiet pass carried over (no network:
nothing is read on that path), and full against carried passes on the loopback stand-ins."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from scheduler.core.models import Plan, Snapshot

Decide = Callable[[Snapshot], Plan]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def quiet_pass(decide: Decide, snapshot: Snapshot, runs: int) -> dict[str, Any]:
    """The carried-over pass of a settled fleet, through Service.run_pass (see the module doc)."""
    from datetime import timedelta

    from scheduler.adapters.catalog import Catalog
    from scheduler.adapters.snapshot_builder import ClusterView
    from scheduler.core.calm import calm_until
    from scheduler.core.simulate import apply_plan
    from scheduler.ops.metrics import MetricsObserver
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    plan = decide(snapshot)
    settled_after = 0
    while plan.actions and settled_after < 12:
        snapshot = apply_plan(snapshot, plan, 10)
        plan = decide(snapshot)
        settled_after += 1
    if plan.actions:
        return {"settled": False, "settled_after_passes": settled_after}
    w0 = time.perf_counter()
    decide(snapshot)
    decide_ms = (time.perf_counter() - w0) * 1000
    # Nothing listens there: a pass that was not carried over would fail loudly.
    config = ServiceConfig(nomad_addr="http://127.0.0.1:9", consul_addr="127.0.0.1:9")
    svc = Service(config, observers=[MetricsObserver()])
    svc.watches = svc._watches()  # the service's own watches, not started: nothing changes
    started = time.monotonic()
    svc.clock = lambda: snapshot.now + timedelta(seconds=time.monotonic() - started)
    view = ClusterView(snapshot, {}, [], Catalog(), set(), set())
    inputs = svc._inputs()
    assert inputs is not None
    w0 = time.perf_counter()
    svc._keep(view, plan, inputs)  # what the full pass adds to keep itself (calm_until)
    keep_ms = (time.perf_counter() - w0) * 1000
    walls: list[float] = []
    for _ in range(runs):
        before = svc.carry.carried
        w0 = time.perf_counter()
        out = svc.run_pass()
        walls.append(time.perf_counter() - w0)
        assert out is plan and svc.carry.carried == before + 1, "the pass was not carried over"
    until = calm_until(snapshot, plan)
    return {
        "settled": True,
        "measures": "Service.run_pass() carried over: the check that nothing changed, and what "
        "a carried pass still does (no read, no decide, no write)",
        "settled_after_passes": settled_after,
        "runs": runs,
        "median_ms": round(statistics.median(walls) * 1000, 4),
        "p90_ms": round(_quantile(walls, 0.9) * 1000, 4),
        "decide_on_settled_ms": round(decide_ms, 2),
        "keep_ms": round(keep_ms, 2),
        "calm_for_s": None if until is None else (until - snapshot.now).total_seconds(),
    }


class _PassTimes:
    """An observer of the service: each pass's duration, full or carried over."""

    def __init__(self) -> None:
        self.full: list[float] = []
        self.carried: list[float] = []

    def pass_finished(self, snapshot: Any, plan: Plan, duration_s: float, errors: Any) -> None:
        self.full.append(duration_s)

    def pass_carried(self, duration_s: float, errors: Any) -> None:
        self.carried.append(duration_s)

    def action_done(self, action: Any, ok: bool, error: str | None) -> None:
        pass


ONE_GPU_MODEL = {
    "owner": "bench",
    "scaling": {"min": 0, "max": 1, "target_per_replica": 1},
    "profiles": [{"name": "one", "gpus": 1}],
    "serve": {"source": "org/bench-model"},
}


def _h100_nodes(count: int) -> list[Any]:
    from scheduler.core.models import GPU, Node

    h100 = "NVIDIA H100 80GB HBM3"
    return [
        Node(
            id=f"node-{i:04d}",
            name=f"n{i}",
            cpu_cores=256,
            memory_gb=4096,
            gpus=[GPU(id=f"GPU-{i}-{g}", model=h100, memory_gb=80) for g in range(8)],
        )
        for i in range(count)
    ]


def service_pass(n_models: int) -> dict[str, Any]:
    """Full against carried passes of the service itself, on the loopback stand-ins (in this
    process: they share its CPU): `n_models` one-GPU models with one replica each, settled;
    then full passes forced by a settings edit that changes no plan, and the carried passes
    between them."""
    import consul as py_consul
    from llm_scheduler_standins.devcluster import DevCluster
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    nodes = _h100_nodes(n_models // 4 + 1)
    base = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0}
    settings = json.dumps(base)
    times = _PassTimes()
    with DevCluster(fleet=nodes, load_delay_s=0.05) as dc:
        host, port = dc.consul_url.removeprefix("http://").split(":")
        kv = py_consul.Consul(host=host, port=int(port)).kv
        kv.put("llm-scheduler/settings", settings)
        for i in range(n_models):
            kv.put(f"llm-scheduler/models/m{i:04d}", json.dumps(ONE_GPU_MODEL))
            kv.put(f"llm-scheduler/demand/m{i:04d}", json.dumps({"inflight": 1}))
        config = ServiceConfig(
            nomad_addr=dc.nomad_url,
            consul_addr=dc.consul_url,
            pass_interval_s=0.2,
            watch_wait_s=5.0,
            lock_delay_s=0,
        )
        svc = Service(config, observers=[times])
        svc.run_in_thread()
        try:
            started = time.monotonic()
            while len(times.carried) < 5:
                if time.monotonic() - started > 300:
                    return {"settled": False, "full_passes": len(times.full)}
                time.sleep(0.2)
            full, carried = len(times.full), len(times.carried)
            for i in range(10):
                # Consul skips a write of the same value (kvsSetTxn): max_victims 3 / 4 in
                # turn, which changes nothing here (no preemption), makes the next pass full.
                kv.put("llm-scheduler/settings", json.dumps({**base, "max_victims": 3 + i % 2}))
                time.sleep(0.6)
            full_s, carried_s = times.full[full:], times.carried[carried:]
        finally:
            svc.stop()
    return {
        "settled": True,
        "measures": "Service.run_pass() against the loopback stand-ins in this process, from "
        "the service's own observer: full passes (reads, decide, status) forced by a "
        "settings edit that changes no plan, and the carried passes between them",
        "models": n_models,
        "nodes": len(nodes),
        "settle_s": round(time.monotonic() - started, 1),
        "full_passes": len(full_s),
        "full_median_ms": round(statistics.median(full_s) * 1000, 2) if full_s else None,
        "carried_passes": len(carried_s),
        "carried_median_ms": round(statistics.median(carried_s) * 1000, 4) if carried_s else None,
    }
