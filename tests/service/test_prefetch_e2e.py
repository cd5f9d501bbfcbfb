"""End to end over the stand-ins on loopback: a model's `serve.prefetch` runs Nomad batch jobs
that download its weights into the nodes' model caches with the image's own downloader; the
stand-in reporter then reports them, a failed download is reported per model, and a prefetch
gives its node up to a replica that needs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

import nomad
from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.fleet_model import ModelCache, Node
from llm_scheduler_standins.model_cache import GB, WeightsTiming
from scheduler.adapters.gpu_reports import parse_record, read_reports
from scheduler.commands.reporter import consul_client
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
SECRET = "hf_notarealtokenbutsecret"
FAST = WeightsTiming(download_gbps=4.0, load_gbps=10.0, default_bytes=GB)  # 0.25 s download


def _fleet(root: Path, free: int = 100 * GB, cpu: float = 64) -> list[Node]:
    """h1 and h2 with a model-cache volume (a stand-in cache with `free` bytes), m1 without."""
    h1, h2, m1 = small_fleet()
    cached = {
        "host_volumes": {VOLUME: {"path": str(root)}},
        "model_cache": ModelCache(free_bytes=free),
        "cpu_cores": cpu,
    }
    return [Node.model_validate({**n.model_dump(), **cached}) for n in (h1, h2)] + [m1]


def _model(prefetch: int, **serve: Any) -> dict[str, Any]:
    return model_value(
        [{"name": "g1", "gpus": 1, "cpu_cores": 8}], serve={**SERVE, "prefetch": prefetch, **serve}
    )


def _prefetch_jobs(dc: DevCluster) -> list[dict[str, Any]]:
    return [j for j in dc.nomad.jobs() if (j.get("Meta") or {}).get("llm_scheduler_prefetch")]


def _prefetch_status(dc: DevCluster) -> dict[str, Any] | None:
    return (status(dc, "m") or {}).get("prefetch")


def _reported(dc: DevCluster, node_id: str) -> list[str]:
    raw = read_reports(consul_client(dc.consul_url)).get(node_id)
    parsed = parse_record(LAYOUT.node_gpus_key(node_id), raw)
    if isinstance(parsed, str) or not isinstance(parsed.cache, dict):
        return []
    return [str(s["source"]) for s in parsed.cache.get("snapshots") or []]  # type: ignore[index,union-attr]


def test_prefetch_fills_two_caches_with_batch_jobs_and_the_reporter_reports_them(
    tmp_path: Path,
) -> None:
    with DevCluster(fleet=_fleet(tmp_path), load_delay_s=0.05, weights=FAST) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("m"), _model(2, env={"HF_TOKEN": SECRET}))
        with capture_logs() as logs, CacheReporter(dc, tmp_path):
            svc = start_leader(dc)
            try:
                done = wait_for(
                    lambda: (p := _prefetch_status(dc)) and len(p["cached"]) == 2 and p,
                    timeout=30,
                    what="weights on two nodes",
                )
                for node in ("node-h1", "node-h2"):
                    wait_for(lambda n=node: SERVE["source"] in _reported(dc, n), what="reports")
            finally:
                svc.stop()
        assert done["wanted"] == 2 and done["failed"] == [] and done["short"] is None
        assert our_jobs(dc, "m") == []  # no replica: nothing asked for one
        jobs = _prefetch_jobs(dc)
        assert len(jobs) == 2
        client = nomad.Nomad(host="127.0.0.1", port=int(dc.nomad_url.rsplit(":", 1)[1]))
        for job in jobs:
            assert (job["Type"], job["Status"], job["Priority"]) == ("batch", "dead", 20)
            (group,) = job["TaskGroups"]
            (task,) = group["Tasks"]
            assert task["Config"]["entrypoint"] == ["hf"]
            assert task["Config"]["args"] == [
                "download", SERVE["source"], "--exclude", "original/*"
            ]  # fmt: skip
            assert task["Env"]["HF_HOME"] == "/root/.cache/huggingface"
            assert task["Env"]["HF_TOKEN"] == SECRET  # as the replicas get serve.env
            assert not task["Resources"].get("Devices")
            assert group["Volumes"]["model-cache"]["Source"] == VOLUME
            allocs = client.job.get_allocations(job["ID"])
            assert [a["ClientStatus"] for a in allocs] == ["complete"]
        assert SECRET not in repr(logs)


def test_a_failed_download_is_reported_per_model_and_not_tried_again(tmp_path: Path) -> None:
    # The caches have no room for the weights (1 GB): each download fails.
    with DevCluster(fleet=_fleet(tmp_path, free=GB // 2), load_delay_s=0.05, weights=FAST) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("m"), _model(1))
        with CacheReporter(dc, tmp_path):
            svc = start_leader(dc)
            try:
                failed = wait_for(
                    lambda: (p := _prefetch_status(dc)) and len(p["failed"]) == 2 and p,
                    timeout=30,
                    what="both downloads failed",
                )
            finally:
                svc.stop()
        assert sorted(failed["failed"]) == ["h1", "h2"] and failed["cached"] == []
        assert failed["short_code"] == "prefetch_no_node"
        jobs = _prefetch_jobs(dc)
        assert len(jobs) == 2 and all(j["Status"] == "dead" and j["Version"] == 0 for j in jobs)


def test_a_replica_that_needs_the_node_stops_its_prefetch_first(tmp_path: Path) -> None:
    slow = WeightsTiming(download_gbps=0.01, load_gbps=10.0, default_bytes=GB)  # 100 s
    fleet = _fleet(tmp_path, cpu=8.2)[:2]  # a replica's 8 cores and a prefetch's 0.5 do not fit
    with DevCluster(fleet=fleet, load_delay_s=0.05, weights=slow) as dc:
        put(dc, LAYOUT.settings, {**FAST_SETTINGS, "prefetch_max": 1})
        put(dc, LAYOUT.model_key("m"), _model(1))
        with CacheReporter(dc, tmp_path):
            svc = start_leader(dc)
            try:
                running = wait_for(
                    lambda: (p := _prefetch_status(dc)) and p["running"] and p,
                    timeout=30,
                    what="a prefetch running",
                )
                (node_name,) = running["running"]
                put(dc, LAYOUT.demand_key("m"), {"inflight": 25})  # two replicas: every node
                wait_for(lambda: len(our_jobs(dc, "m")) == 2, timeout=30, what="two replicas")
                wait_for(lambda: not _prefetch_jobs(dc), timeout=30, what="the prefetch gone")
            finally:
                svc.stop()
        assert node_name in ("h1", "h2")
