"""A planned stop hands the lock over at once (released before the session
is destroyed, as hashicorp/consul api/lock.go Unlock does), not after the lock-delay."""

from __future__ import annotations

import time

from e2e_helpers import LAYOUT, model_value, our_jobs, put, service_config, wait_for

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.service.loop import Service


def test_planned_stop_hands_over_before_the_lock_delay(cluster: DevCluster) -> None:
    # lock_delay_s=15 is Consul's default: an invalidated session would block the standby
    # for 15 s (state/session.go arms it on invalidation; a release arms nothing).
    a = Service(service_config(cluster, lock_delay_s=15))
    b = Service(service_config(cluster, lock_delay_s=15))
    a.run_in_thread()
    wait_for(lambda: a.leader.is_leader, what="a leads")
    b.run_in_thread()
    try:
        put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
        put(cluster, LAYOUT.demand_key("llama"), {"inflight": 15})
        wait_for(lambda: len(our_jobs(cluster, "llama")) == 2, what="two jobs")
        wait_for(lambda: b.leader.session is not None, what="b's session")
        standby_session = b.leader.session
        stopped = time.monotonic()
        a.stop()
        wait_for(lambda: b.leader.is_leader, timeout=10, what="takeover")
        took = time.monotonic() - stopped
        assert took < 5, f"takeover took {took:.1f} s: the lock-delay was armed"
        assert b.leader.session == standby_session  # the standby kept its session
        wait_for(lambda: b.passes >= 3, what="passes of the new leader")
        jobs = our_jobs(cluster, "llama")
        assert len(jobs) == 2, "a duplicate or lost replica across the hand-off"
    finally:
        a.stop()
        b.stop()
