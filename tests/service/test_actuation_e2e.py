"""Actuation runs beside the pass loop, bounded; a slow Nomad call holds back
neither the next decisions nor other models, nothing is registered twice while in flight, and
the backlog gauge shows what is queued."""

from __future__ import annotations

import time
from typing import Any

from e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    service_config,
    small_fleet,
    wait_for,
)

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.faults import Faults
from scheduler.adapters.nomad_listings import ALLOCATIONS, JOBS, NODES
from scheduler.ops.metrics import MetricsObserver
from scheduler.service.loop import Service

SLOW_S = 3.0  # far above a loaded machine's pass-to-register overhead (about 2 s seen)
READS_SLOW_S = 3.0


def test_a_slow_register_holds_back_neither_other_models_nor_the_loop() -> None:
    faults = Faults(seed=5)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        for name in ("alpha", "beta"):
            put(dc, LAYOUT.model_key(name), model_value([{"name": "p", "gpus": 1}]))
        metrics = MetricsObserver()
        svc = Service(service_config(dc, actuation_workers=4), observers=[metrics])
        svc.run_in_thread()
        try:
            wait_for(lambda: svc.leader.is_leader and svc.passes >= 1, what="leadership")
            # Every start renders its job through Nomad's /v1/jobs/parse first: make it slow.
            faults.set("/v1/jobs/parse", latency_s=SLOW_S)
            put(dc, LAYOUT.demand_key("alpha"), {"inflight": 5})
            wait_for(lambda: svc.backlog() >= 1, what="alpha's start in flight")
            backlog = metrics.registry.get_sample_value("llm_scheduler_actuation_backlog")
            assert backlog is not None and backlog >= 1
            passes = svc.passes
            written = time.monotonic()
            put(dc, LAYOUT.demand_key("beta"), {"inflight": 5})
            wait_for(lambda: our_jobs(dc, "beta"), timeout=15, what="beta's job")
            took = time.monotonic() - written
            # In series beta waited for alpha's slow call, then made its own: 2 x SLOW_S.
            assert took < 2 * SLOW_S - 0.3, f"beta took {took:.2f} s"
            assert svc.passes > passes, "the loop waited for the slow call"
            wait_for(lambda: our_jobs(dc, "alpha"), timeout=15, what="alpha's job")
            wait_for(lambda: svc.backlog() == 0, what="the backlog drained")
            wait_for(lambda: svc.passes > passes + 4, what="more passes")
            # Passes during the slow call did not register alpha or beta a second time.
            assert len(our_jobs(dc, "alpha", live_only=False)) == 1
            assert len(our_jobs(dc, "beta", live_only=False)) == 1
        finally:
            svc.stop()


def test_a_slow_nomad_holds_back_no_decision_on_new_demand() -> None:
    """A pass on new demand takes Nomad's listings from the watches' latest answers (blocking
    queries, answered as soon as a listing changes) instead of asking again: with every Nomad
    read slow, the start is decided and queued without waiting for one."""
    faults = Faults(seed=6)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("alpha"), model_value([{"name": "p", "gpus": 1}]))
        svc = Service(service_config(dc, actuation_workers=4))
        svc.run_in_thread()
        try:
            wait_for(lambda: svc.leader.is_leader and svc.passes >= 1, what="leadership")
            listings = svc.builder.listings
            assert listings is not None
            wait_for(
                lambda: all(listings.fresh(n, 0.0) for n in (NODES, JOBS, ALLOCATIONS)),
                what="every Nomad watch's first answer",
            )
            for path in ("/v1/job", "/v1/allocation", "/v1/node", "/v1/evaluation"):
                faults.set(path, latency_s=READS_SLOW_S)
            written = time.monotonic()
            put(dc, LAYOUT.demand_key("alpha"), {"inflight": 5})
            wait_for(lambda: svc.backlog() >= 1, timeout=15, what="alpha's start queued")
            took = time.monotonic() - written
            # Asking Nomad again, even all listings side by side, costs READS_SLOW_S.
            assert took < READS_SLOW_S - 0.5, f"the decision waited {took:.2f} s for Nomad"
            wait_for(lambda: our_jobs(dc, "alpha"), timeout=30, what="alpha's job")
            assert len(our_jobs(dc, "alpha", live_only=False)) == 1
        finally:
            svc.stop()


def test_the_jobs_it_registers_and_stops_are_never_read_back() -> None:
    """A job the actuator registered is known at the JobModifyIndex Nomad answered, and a job
    that was only stopped keeps its spec: neither costs a GET /v1/job/<id> in later passes
    (under churn that was a slow round trip per changed job in every pass). Nor are its
    evaluations read while a listing shows no allocation of it yet: only a job summary with
    allocations queued (a refused placement) is worth that read."""
    faults = Faults(seed=7)
    # The allocations listing answers late: a pass sees the new job before its allocation.
    faults.set("/v1/allocation", latency_s=0.5)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("alpha"), model_value([{"name": "p", "gpus": 1}]))
        svc = Service(service_config(dc))
        read: list[str] = []
        real = svc.nomad.job_or_none

        def counted(job_id: str) -> Any:
            read.append(job_id)
            return real(job_id)

        svc.nomad.job_or_none = counted  # type: ignore[method-assign]
        real_get = svc.nomad.get

        def get(path: str, params: dict[str, Any] | None = None) -> Any:
            read.append(path)
            return real_get(path, params)

        svc.nomad.get = get  # type: ignore[method-assign]
        svc.run_in_thread()
        try:
            put(dc, LAYOUT.demand_key("alpha"), {"inflight": 5})
            (job,) = wait_for(lambda: our_jobs(dc, "alpha"), what="alpha's job")
            wait_for(lambda: svc.last_plan and svc.last_plan.models["alpha"].live == 1)
            put(dc, LAYOUT.demand_key("alpha"), {"inflight": 0})
            wait_for(lambda: not our_jobs(dc, "alpha"), what="alpha's job stopped")
            passes = svc.passes
            wait_for(lambda: svc.passes > passes + 3, what="more passes")
            assert svc.last_plan is not None and svc.last_plan.models["alpha"].live == 0
            assert [p for p in read if job["ID"] in p] == []
        finally:
            svc.stop()
