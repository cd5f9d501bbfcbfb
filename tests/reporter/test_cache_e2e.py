"""End to end on loopback: a stand-in node advertises its model-cache volume through the Nomad
stand-in, the reporter scans the node's stand-in cache (hub layout) and writes it to the Consul
stand-in next to the GPUs, and the scheduler's side reads both into the node's cache facts."""

from __future__ import annotations

import threading
from pathlib import Path

import nomad
from llm_scheduler_standins.consul import ConsulStandin
from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.fleet_model import CachedWeights, HostVolume, ModelCache
from llm_scheduler_standins.model_cache import GB, write_hub_cache
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.adapters.gpu_reports import apply_reports, read_reports
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.commands.reporter import consul_client
from scheduler.reporter.cache_scan import CacheScanner
from scheduler.reporter.fake_gpus import h100_fleet
from scheduler.reporter.fake_nvml import FakeNvml
from scheduler.reporter.probe import NvmlProbe
from scheduler.reporter.writer import ReportWriter, run_reporter
from tests.standins.nomad.nomad_helpers import wait_for

VOLUME = "llm-model-cache"
COMMIT = "c" * 40


def test_the_reported_cache_reaches_the_snapshot_node(tmp_path: Path) -> None:
    cache = ModelCache(weights=[CachedWeights(source="org/m", commit=COMMIT, bytes=30 * GB)])
    first = builtin_fleet()[0].model_copy(
        update={"host_volumes": {VOLUME: HostVolume(path=str(tmp_path))}, "model_cache": cache}
    )
    write_hub_cache(tmp_path / "hub", cache)
    nomad_standin = NomadStandin([first], load_delay_s=0.0)
    nomad_standin.start()
    consul = ConsulStandin()
    server = consul.start(port=0)
    try:
        assert nomad_standin._server is not None
        client = nomad.Nomad(host="127.0.0.1", port=nomad_standin._server.port, timeout=10)
        node = node_from_nomad(client.node.get_node(first.id))
        assert node.host_volumes == [VOLUME] and node.cache is None
        kv = consul_client(server.url)
        probe = NvmlProbe(first.id, nvml=FakeNvml(h100_fleet()))
        probe.open()
        writer = ReportWriter(kv, KVLayout().node_gpus_key(first.id), ttl_s=10, session_name="r")
        stop = threading.Event()
        loop = threading.Thread(
            target=run_reporter,
            args=(probe, writer),
            kwargs={"interval_s": 0.05, "stop": stop, "cache": CacheScanner(tmp_path, VOLUME)},
        )
        loop.start()
        try:
            wait_for(lambda: bool(read_reports(kv)))
            records = read_reports(kv)
        finally:
            stop.set()
            loop.join(5)
        (updated,), warnings = apply_reports([node], records)
        assert updated.cache is not None and updated.cache.snapshots == []
        assert any("org/m" in w and "catalog" in w for w in warnings)
        (updated,), _ = apply_reports([node], records, sources={"org/m"})
        assert updated.cache is not None
        (snapshot,) = updated.cache.snapshots
        assert (snapshot.source, snapshot.commit, snapshot.weights_bytes) == (
            "org/m",
            COMMIT,
            30 * GB,
        )
    finally:
        consul.close()
        nomad_standin.stop()
