"""Issue 11, item 5: actuation runs beside the pass loop, bounded; a slow Nomad call holds back
neither the next decisions nor other models, nothing is registered twice while in flight, and
the backlog gauge shows what is queued."""

from __future__ import annotations

import time

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
from scheduler.ops.metrics import MetricsObserver
from scheduler.service.loop import Service

SLOW_S = 2.0


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
