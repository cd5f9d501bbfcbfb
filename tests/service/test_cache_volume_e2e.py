"""End to end over the stand-ins: a node's model-cache volume vanishes (its client restarted
without it) while a replica runs there. Its reporter still reports the cache: one line naming
the key and field in status _errors, the node counts as cold, and the replica runs on."""

from __future__ import annotations

import time
from pathlib import Path

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.fleet_model import CachedWeights, ModelCache, Node
from llm_scheduler_standins.model_cache import GB, WeightsTiming
from tests.service.cache_reporter import CacheReporter
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    SERVE,
    model_value,
    our_jobs,
    put,
    small_fleet,
    start_leader,
    status,
    wait_for,
)

VOLUME = "llm-model-cache"
TIMING = WeightsTiming(download_gbps=4.0, load_gbps=10.0, default_bytes=GB)


def _node(root: Path) -> Node:
    h1 = small_fleet()[0]
    cache = ModelCache(weights=[CachedWeights(source=SERVE["source"], commit="c" * 40, bytes=GB)])
    extra = {"host_volumes": {VOLUME: {"path": str(root)}}, "model_cache": cache}
    return Node.model_validate({**h1.model_dump(), **extra})


def _vanished(dc: DevCluster) -> list[str]:
    errors = (status(dc, "_errors") or {}).get("errors") or []
    return [e for e in errors if "no longer advertises" in e]


def test_a_vanished_volume_makes_the_node_cold_and_leaves_its_replica_running(
    tmp_path: Path,
) -> None:
    with DevCluster(fleet=[_node(tmp_path)], load_delay_s=0.05, weights=TIMING) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        scaling = {"min": 1, "max": 1, "target_per_replica": 10}
        put(dc, LAYOUT.model_key("m"), model_value([{"name": "g1", "gpus": 1}], scaling=scaling))
        with CacheReporter(dc, tmp_path):
            svc = start_leader(dc)
            try:
                (before,) = wait_for(lambda: our_jobs(dc, "m"), what="a replica")
                dc.nomad.set_host_volumes("node-h1", {})
                (line,) = wait_for(lambda: _vanished(dc), what="the vanished volume reported")
                passes = svc.passes
                wait_for(lambda: svc.passes >= passes + 3, what="three more passes")
                time.sleep(0.2)
                after = our_jobs(dc, "m")
            finally:
                svc.stop()
    key = LAYOUT.node_gpus_key("node-h1")
    assert line.startswith(f"cache report {key}: field cache.volume:") and "cold" in line
    assert [j["ID"] for j in after] == [before["ID"]]  # not stopped, not replaced
