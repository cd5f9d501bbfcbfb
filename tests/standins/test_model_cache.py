"""The stand-in nodes' model caches: warm starts load, cold ones download then load, and a cold
start leaves the weights cached; the hub layout the reporter scans."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import scan_cache_dir

import nomad
from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.fleet_model import CachedWeights, ModelCache
from llm_scheduler_standins.model_cache import (
    GB,
    StandinCaches,
    WeightsTiming,
    model_source,
    write_hub_cache,
)
from llm_scheduler_standins.nomad import NomadStandin
from tests.standins.nomad.nomad_helpers import gpu_job, wait_for

TIMING = WeightsTiming(download_gbps=1.0, load_gbps=10.0, default_bytes=20 * GB)
COMMIT = "a" * 40


def _fleet_with_cache(weights: list[CachedWeights], free: int = 10**12) -> list:
    nodes = builtin_fleet()
    first = nodes[0].model_copy(
        update={"model_cache": ModelCache(free_bytes=free, weights=weights)}
    )
    return [first, *nodes[1:]]


def test_warm_loads_and_cold_downloads_first() -> None:
    fleet = _fleet_with_cache([CachedWeights(source="org/m", commit=COMMIT, bytes=10 * GB)])
    caches = StandinCaches(fleet, TIMING)
    assert caches.start(fleet[0].id, "org/m") == 1.0  # 10 GB at 10 GB/s
    assert caches.start(fleet[1].id, "org/m") == 11.0  # no cache: download, then load


def test_a_cold_start_leaves_the_weights_cached() -> None:
    fleet = _fleet_with_cache([])
    caches = StandinCaches(fleet, TIMING)
    assert caches.start(fleet[0].id, "org/new") == 22.0
    assert caches.start(fleet[0].id, "org/new") == 2.0
    cache = caches.cache(fleet[0].id)
    assert cache is not None and cache.free_bytes == 10**12 - 20 * GB


def test_a_full_cache_stays_cold() -> None:
    fleet = _fleet_with_cache([], free=GB)
    caches = StandinCaches(fleet, TIMING)
    assert caches.start(fleet[0].id, "org/big") == caches.start(fleet[0].id, "org/big") == 22.0


def test_the_source_is_read_from_the_runtime_arguments() -> None:
    def job(args: list[str]) -> dict:
        task = {"Name": "t", "Config": {"args": args}}
        return {"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [task]}]}

    assert model_source(job(["org/a", "--port", "8000"]), "g") == "org/a"
    assert (
        model_source(job(["-m", "sglang.launch_server", "--model-path", "org/b"]), "g") == "org/b"
    )
    assert model_source({"ID": "j", "Meta": {"llm_scheduler_model": "m"}}, "g") == "m"


def test_the_nomad_standin_keeps_a_cold_allocation_pending_while_it_downloads() -> None:
    fleet = _fleet_with_cache([])
    timing = WeightsTiming(download_gbps=1.0, load_gbps=1000.0, default_bytes=GB)
    server = NomadStandin(fleet, load_delay_s=0.0, weights=timing)
    server.start()
    try:
        body = gpu_job("llm-c-r1", node_id=fleet[0].id)
        body["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["args"] = ["org/cold"]
        assert server._server is not None
        client = nomad.Nomad(host="127.0.0.1", port=server._server.port, timeout=10)
        client.jobs.register_job(body)
        (alloc,) = client.job.get_allocations("llm-c-r1")
        assert alloc["ClientStatus"] == "pending"
        wait_for(lambda: client.job.get_allocations("llm-c-r1")[0]["ClientStatus"] == "running")
        assert server.cluster.caches is not None
        cache = server.cluster.caches.cache(fleet[0].id)
        assert cache is not None and [w.source for w in cache.weights] == ["org/cold"]
    finally:
        server.stop()


def test_the_hub_layout_scans_as_complete_snapshots(tmp_path: Path) -> None:
    cache = ModelCache(
        weights=[CachedWeights(source="org/m", commit=COMMIT, bytes=140 * GB, last_used=1.7e9)]
    )
    write_hub_cache(tmp_path, cache)
    info = scan_cache_dir(tmp_path)
    (repo,) = info.repos
    (revision,) = repo.revisions
    assert (repo.repo_id, revision.commit_hash, revision.refs) == ("org/m", COMMIT, {"main"})
    assert revision.size_on_disk >= 140 * GB
    assert not info.warnings
