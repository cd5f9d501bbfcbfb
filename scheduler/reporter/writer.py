"""Writing the node's GPU record to Consul KV under a session, and the reporter loop.

The key is acquired with a session that has a TTL and behavior=delete: while the reporter
renews the session the record stays; when the node dies (or the reporter stops and destroys
its session) Consul deletes the key, so the scheduler never trusts a stale record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.reporter.cache_scan import CacheScanner
from scheduler.reporter.probe import GpuProbe
from scheduler.reporter.record import NodeGpuReport

# Fields that move all the time on a busy GPU; a change in them alone is written at most every
# `refresh_s`, so that watchers of the nodes/ prefix are not woken on every tick.
VOLATILE_FIELDS = {"memory_used_bytes", "utilization_gpu_pct", "utilization_memory_pct"}

# Consul refuses session TTLs outside 10s..24h (https://developer.hashicorp.com/consul/api-docs/session).
MIN_TTL_S = 10
MAX_TTL_S = 86400


class SessionError(RuntimeError):
    """Consul would not give the reporter a session; the record is not written without one."""


class ReportWriter:
    """Owns one Consul session and the node's `.../gpus` key. Not thread-safe."""

    def __init__(
        self,
        consul_client: Any,
        key: str,
        *,
        ttl_s: int,
        session_name: str,
        refresh_s: float = 30.0,
        log: Callable[[str], None] = lambda _line: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consul = consul_client
        self._key = key
        self._ttl_s = ttl_s
        self._name = session_name
        self._refresh_s = refresh_s
        self._log = log
        self._clock = clock
        self.session_id: str | None = None
        self._written: tuple[str | None, str, float] | None = None  # session, stable part, when
        self.writes = 0

    @property
    def key(self) -> str:
        return self._key

    def _ensure_session(self) -> str:
        if self.session_id is None:
            created = self._consul.session.create(
                name=self._name, ttl=self._ttl_s, behavior="delete", lock_delay=0
            )
            if not created:  # py-consul answers None on a 404: never write without a session
                raise SessionError(f"Consul did not create a session for {self._key}")
            self.session_id = str(created)
            self._log(f"created session {self.session_id} (ttl {self._ttl_s}s, behavior delete)")
        return self.session_id

    def renew(self) -> bool:
        """Extend the session; False (and a new session on the next publish) if it expired."""
        from consul.exceptions import NotFound

        if self.session_id is None:
            return False
        try:
            self._consul.session.renew(self.session_id)
            return True
        except NotFound:
            self._log(f"session {self.session_id} expired; the record was deleted, re-creating it")
            self.session_id = None
            self._written = None
            return False

    def publish(self, report: NodeGpuReport) -> bool:
        """Write the record, holding the key with our session. False if another session holds it
        (for example a previous reporter on this node whose session has not expired yet)."""
        session = self._ensure_session()
        stable = _stable_part(report)
        now = self._clock()
        if self._written is not None:
            last_session, last_stable, last_at = self._written
            if (
                last_session == session
                and last_stable == stable
                and now - last_at < self._refresh_s
            ):
                return True  # nothing that matters changed; the renewed session keeps it alive
        if self._consul.kv.put(self._key, report.model_dump_json(), acquire=session):
            self._written = (session, stable, now)
            self.writes += 1
            return True
        self._log(f"{self._key} is held by another session; retrying on the next tick")
        return False

    def close(self) -> None:
        """Destroy the session: with behavior=delete, Consul removes the record."""
        if self.session_id is None:
            return
        try:
            self._consul.session.destroy(self.session_id)
        except Exception as err:  # best effort at shutdown; the TTL deletes it anyway
            self._log(f"could not destroy session {self.session_id}: {err}")
        self.session_id = None
        self._written = None


def _stable_part(report: NodeGpuReport) -> str:
    data = report.model_dump(mode="json", exclude={"reported_at"})
    for gpu in data["gpus"]:
        for name in VOLATILE_FIELDS:
            gpu.pop(name, None)
        for mig in gpu["mig_devices"]:
            mig.pop("memory_used_bytes", None)
    return repr(data)


def with_cache(report: NodeGpuReport, cache: CacheScanner | None) -> NodeGpuReport:
    """The GPU record with the model cache next to the GPUs (when the node has one)."""
    if cache is None:
        return report
    return report.model_copy(update={"cache": cache.read().model_dump(mode="json")})


def run_reporter(
    probe: GpuProbe,
    writer: ReportWriter,
    *,
    interval_s: float,
    stop: threading.Event,
    log: Callable[[str], None] = lambda _line: None,
    max_ticks: int | None = None,
    cache: CacheScanner | None = None,
) -> int:
    """Read and publish every `interval_s` until `stop` is set; returns the ticks run.
    Consul being unreachable for a while is logged and retried, never fatal."""
    import requests

    ticks = 0
    try:
        while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
            ticks += 1
            try:
                writer.renew()
                writer.publish(with_cache(probe.read(), cache))
            except (requests.RequestException, OSError) as err:
                log(f"Consul is not reachable ({err}); retrying in {interval_s:g}s")
            except Exception as err:
                # A Consul error answer (consul.ConsulException and friends): keep going.
                log(f"publishing the GPU record failed: {err}")
            stop.wait(interval_s)
    finally:
        writer.close()
        probe.close()
    return ticks
