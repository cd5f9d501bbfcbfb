"""An action's error stands in the model's status while it is true, and not after."""

from __future__ import annotations

from e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    small_fleet,
    start_leader,
    status,
    wait_for,
)

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.faults import Faults


def _last_error(dc: DevCluster) -> str:
    return str((status(dc, "llama") or {}).get("last_error") or "")


def test_a_stop_that_failed_then_succeeded_leaves_no_error_in_status() -> None:
    faults = Faults(seed=1)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
        put(dc, LAYOUT.demand_key("llama"), {"inflight": 5})
        svc = start_leader(dc)
        try:
            job = wait_for(lambda: our_jobs(dc, "llama"), what="a job")[0]
            faults.set(f"/v1/job/{job['ID']}", error_rate=1.0)  # its deregister fails
            put(dc, LAYOUT.demand_key("llama"), {"inflight": 0})
            wait_for(lambda: _last_error(dc).startswith("stop "), what="the stop's error")
            faults.clear()
            wait_for(lambda: not our_jobs(dc, "llama"), what="the stop once Nomad answers")
            wait_for(
                lambda: status(dc, "llama") is not None and not _last_error(dc), what="no error"
            )
            assert status(dc, "llama")["last_error"] is None  # type: ignore[index]
        finally:
            svc.stop()
