"""The gateway's demand key: this instance's counts per model, under a Consul session.

One key per instance (`KVLayout.gateway_demand_key`), held with `?acquire=` by a TTL session
with `Behavior=delete`: when the instance dies, the session expires and Consul deletes the
key, and the scheduler keeps the counts for eviction_grace_s. Written at most once per
`demand_interval_s` while the counts change, every `demand_heartbeat_s` while requests flow,
and renewed at TTL/2. A failed write is retried at the next tick; /healthz says so meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import structlog

from scheduler.adapters.kv_layout import KVLayout
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.consul import AsyncConsul, ConsulUnavailable
from scheduler.gateway.metrics import GatewayMetrics
from scheduler.gateway.state import GatewayState

log = structlog.get_logger("gateway")
TICK_S = 0.1


class DemandWriter:
    def __init__(
        self, state: GatewayState, consul: AsyncConsul, config: GatewayConfig,
        metrics: GatewayMetrics,
    ) -> None:  # fmt: skip
        self.state, self.consul, self.config, self.metrics = state, consul, config, metrics
        self.key = KVLayout(config.kv_prefix).gateway_demand_key(config.instance)
        self.session: str | None = None
        self.written_version = -1
        self.last_write = 0.0
        self.renewed = 0.0
        self.writes = 0
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def body(self) -> bytes:
        models = {m: c.as_json() for m, c in sorted(self.state.counts.items())}
        return json.dumps({"instance": self.config.instance, "models": models}).encode()

    def due(self, now: float) -> bool:
        if self.session is None or self.written_version < 0:
            return True
        since = now - self.last_write
        if self.state.version != self.written_version:
            return since >= self.config.demand_interval_s
        return self.state.busy() and since >= self.config.demand_heartbeat_s

    async def tick(self) -> None:
        now = time.monotonic()
        try:
            every = self.config.session_renew_s or self.config.session_ttl_s / 2
            if self.session is not None and now - self.renewed >= every:
                if not await self.consul.session_renew(self.session):
                    log.warning("demand_session_lost", session=self.session)
                    self.session, self.written_version = None, -1
                self.renewed = now
            if self.due(now):
                await self._write(now)
            self.state.consul.ok("demand")
        except ConsulUnavailable as exc:
            if "demand" not in self.state.consul.failures:
                log.warning("demand_write_failed", key=self.key, error=str(exc))
            self.state.consul.failed("demand", str(exc))
            self.metrics.demand_writes.labels("failed").inc()

    async def _write(self, now: float) -> None:
        if self.session is None:
            self.session = await self.consul.session_create(
                f"llm-scheduler gateway {self.config.instance}", self.config.session_ttl_s
            )
            self.renewed = now
        version = self.state.version
        if not await self.consul.put_acquired(self.key, self.body(), self.session):
            raise ConsulUnavailable(f"PUT {self.key}?acquire: refused (session gone?)")
        self.written_version, self.last_write = version, now
        self.writes += 1
        self.metrics.demand_writes.labels("written").inc()

    async def _run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(TICK_S)

    async def stop(self) -> None:
        """Stop writing and destroy the session: Consul deletes the key with it."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.session is not None:
            try:
                await self.consul.session_destroy(self.session)
            except ConsulUnavailable as exc:
                log.warning("demand_session_not_destroyed", session=self.session, error=str(exc))
            self.session = None
