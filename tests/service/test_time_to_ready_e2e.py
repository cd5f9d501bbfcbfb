"""End to end over the stand-ins: a cold start's time to ready (the Nomad stand-in downloads then
loads the weights) is learned, kept in the time-to-ready state key with the expected times that
`status` shows, and read back by a new service instance (a restart or a new leader)."""

from __future__ import annotations

import json
from typing import Any

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_cache import GB, WeightsTiming
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
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
