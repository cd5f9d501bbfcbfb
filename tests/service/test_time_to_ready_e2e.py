"""End to end over the stand-ins: a cold start's time to ready (the Nomad stand-in downloads then
loads the weights) is learned, kept in the time-to-ready state key with the expected times that
`status` shows, and read back by a new service instance (a restart or a new leader)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_cache import GB, WeightsTiming
from scheduler.ops.wiring import start_ops
from scheduler.service.loop import Service
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    service_config,
    small_fleet,
    start_leader,
    wait_for,
)

# 1 GB: 0.5 s to download at 2 GB/s, then 0.1 s to load at 10 GB/s.
TIMING = WeightsTiming(download_gbps=2.0, load_gbps=10.0, default_bytes=GB)


def _kept(dc: DevCluster) -> dict[str, Any] | None:
    raw = dc.consul.kv_get(LAYOUT.time_to_ready)
    return json.loads(raw) if raw else None


def _learned(dc: DevCluster) -> dict[str, Any] | None:
    kept = _kept(dc)
    return kept if kept and "m" in kept["models"] else None


def test_a_cold_start_is_learned_kept_and_read_back_by_a_new_instance() -> None:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, weights=TIMING) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        scaling = {"min": 1, "max": 1, "target_per_replica": 10}
        put(dc, LAYOUT.model_key("m"), model_value([{"name": "g1", "gpus": 1}], scaling=scaling))
        first = start_leader(dc)
        try:
            kept = wait_for(lambda: _learned(dc), timeout=30, what="a learned time to ready")
        finally:
            first.stop()
        cold = kept["models"]["m"]["cold"]
        assert cold["count"] == 1 and "warm" not in kept["models"]["m"]
        assert 0.6 <= cold["mean_s"] < 30  # at least the download and the load
        assert kept["expected"]["m"]["cold_s"] == cold["mean_s"]
        assert kept["expected"]["m"]["learned"] == {"cold": 1}

        second = start_leader(dc)
        try:
            wait_for(lambda: second.ready.expected.get("m"), what="the second's estimates")
            assert second.ready.expected["m"]["cold_s"] == cold["mean_s"]
            assert (_kept(dc) or {}).get("models") == kept["models"]  # kept, not wiped
        finally:
            second.stop()


def test_a_bad_time_to_ready_value_is_reported_by_key_and_field_and_counted() -> None:
    """Read where the snapshot's KV listing is: each bad part is an input error (status
    _errors, the input-error metrics, one log line) naming the key and field; the good part
    is read back. The leader then writes its own estimates over the bad value."""
    bad = {
        "models": {
            "m": {"cold": {"mean_s": 40.0, "count": 2}, "warm": {"mean_s": -5, "count": 1}},
            "x": "fast",
        }
    }
    key = LAYOUT.time_to_ready
    wanted = [f"{key}: models.m.warm: should be", f"{key}: models.x.warm: should be"]
    ops = start_ops("127.0.0.1:0")
    try:
        with DevCluster(fleet=small_fleet(), load_delay_s=0.05, weights=TIMING) as dc:
            put(dc, LAYOUT.settings, FAST_SETTINGS)
            put(dc, key, bad)
            svc = Service(service_config(dc), observers=ops.observers)
            errors = svc.builder.build(datetime.now(UTC)).input_errors  # what _errors gets
            assert all(any(e.startswith(w) for e in errors) for w in wanted), errors
            with capture_logs() as logs:
                svc.run_in_thread()
                try:
                    wait_for(lambda: svc.ready.tracker.estimates.observed, what="the good part")
                    wait_for(lambda: "-5" not in (dc.consul.kv_get(key) or b"-5").decode())
                    kept = dict(svc.ready.tracker.estimates.observed)
                finally:
                    svc.stop()
    finally:
        ops.stop()
    logged = [str(e.get("error")) for e in logs if e.get("event") == "bad_input"]
    assert all(any(line.startswith(w) for line in logged) for w in wanted), logged
    counted = ops.metrics.registry.get_sample_value("llm_scheduler_errors_total", {"kind": "input"})
    assert counted is not None and counted >= 2
    assert [(k, v.mean_s) for k, v in kept.items()] == [(("m", "cold"), 40.0)]
