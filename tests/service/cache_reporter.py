"""The stand-in reporter of the e2e tests: each node's stand-in model cache laid out as the
Hugging Face hub does (write_hub_cache), scanned by the real reporter's scan, and published to
the Consul stand-in by the real ReportWriter over loopback, as the GPU reporter does on a node
with the model-cache volume."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_cache import write_hub_cache
from scheduler.adapters.kv_layout import KVLayout
from scheduler.commands.reporter import consul_client
from scheduler.reporter.cache_scan import scan_model_cache
from scheduler.reporter.record import NodeGpuReport
from scheduler.reporter.writer import ReportWriter


class CacheReporter:
    def __init__(self, dc: DevCluster, root: Path, interval_s: float = 0.1) -> None:
        self.dc, self.root, self.interval_s = dc, root, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        caches = self.dc.nomad.cluster.caches
        assert caches is not None
        kv = consul_client(self.dc.consul_url)
        nodes = [n for n in self.dc.fleet if getattr(n, "model_cache", None) is not None]
        writers = {
            n.id: ReportWriter(kv, KVLayout().node_gpus_key(n.id), ttl_s=10, session_name="r")
            for n in nodes
        }
        try:
            while not self._stop.is_set():
                for node in nodes:
                    cache = caches.cache(node.id)
                    assert cache is not None
                    home = self.root / node.id
                    write_hub_cache(home / "hub", cache)
                    # The stand-in volume's room, not the test machine's disk.
                    scanned = scan_model_cache(home, cache.volume)
                    scanned = scanned.model_copy(update={"free_bytes": cache.free_bytes})
                    report = NodeGpuReport(
                        node_id=node.id,
                        reported_at=datetime.now(UTC),
                        cache=scanned.model_dump(mode="json"),
                    )
                    writers[node.id].renew()
                    writers[node.id].publish(report)
                self._stop.wait(self.interval_s)
        finally:
            for writer in writers.values():
                writer.close()

    def __enter__(self) -> CacheReporter:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)
