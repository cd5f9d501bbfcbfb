"""The gateway's background tasks: Consul watches (catalog, statuses, each model's health),
the probe of replicas that are starting while requests wait for them, and the read of
replicas' queue and KV-cache for balancing.

Consul unreachable: the last known catalog and replicas stay in use and `/healthz` says so;
each watch retries with a growing pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import httpx
import structlog

from scheduler.adapters.kv_layout import KVLayout
from scheduler.demand.metrics_text import MetricsError, parse_metrics
from scheduler.gateway.catalog import decode_value, read_models
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.consul import AsyncConsul, ConsulUnavailable
from scheduler.gateway.metrics import GatewayMetrics
from scheduler.gateway.replicas import parse_entries
from scheduler.gateway.state import GatewayState

log = structlog.get_logger("gateway")
MIN_GAP_S = 0.05  # between two blocking queries of one watch: a churning index cannot spin
BACKOFF_MAX_S = 5.0


class Watches:
    def __init__(
        self,
        state: GatewayState,
        consul: AsyncConsul,
        upstream: httpx.AsyncClient,
        config: GatewayConfig,
        metrics: GatewayMetrics,
        service_name: Callable[[str], str],
    ) -> None:
        self.state, self.consul, self.upstream = state, consul, upstream
        self.config, self.metrics, self.service_name = config, metrics, service_name
        self.layout = KVLayout(config.kv_prefix)
        self.tasks: list[asyncio.Task[None]] = []
        self.health_tasks: dict[str, asyncio.Task[None]] = {}
        self.catalog_ready = asyncio.Event()

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._loop("catalog", self._catalog)),
            asyncio.create_task(self._loop("status", self._statuses)),
            asyncio.create_task(self._every(self.config.probe_interval_s, self._probe)),
        ]
        if self.config.signals_interval_s > 0:
            self.tasks.append(
                asyncio.create_task(self._every(self.config.signals_interval_s, self._signals))
            )

    async def stop(self) -> None:
        tasks = [*self.tasks, *self.health_tasks.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self, what: str, step: Callable[[int], Awaitable[int]]) -> None:
        """One blocking-query watch: `step(index)` returns the next index."""
        index, pause = 0, MIN_GAP_S
        while True:
            started = time.monotonic()
            try:
                index = await step(index)
                self.state.consul.ok(what)
                pause = MIN_GAP_S
            except ConsulUnavailable as exc:
                if what not in self.state.consul.failures:
                    log.warning("consul_unreachable", watch=what, error=str(exc))
                self.state.consul.failed(what, str(exc))
                self.metrics.consul_errors.labels(what).inc()
                index, pause = 0, min(max(pause * 2, 0.2), BACKOFF_MAX_S)
            await asyncio.sleep(max(pause - (time.monotonic() - started), 0.0))

    async def _catalog(self, index: int) -> int:
        entries, index = await self.consul.kv_list(self.layout.models, index)
        models, problems = read_models(
            entries, self.layout.models, self.config.activation_timeout_s, self.config.max_queued
        )
        for line in problems:
            log.warning("catalog_value", problem=line)
            self.metrics.bad_input.labels("catalog").inc()
        self.state.models = models
        self.state.catalog_read = True
        for name in models.keys() - self.health_tasks.keys():
            watch = self._loop(f"health:{name}", self._health_step(name))
            self.health_tasks[name] = asyncio.create_task(watch)
        for name in self.health_tasks.keys() - models.keys():
            self.health_tasks.pop(name).cancel()
            self.state.replicas.pop(name, None)
        self.catalog_ready.set()
        return index

    def _health_step(self, model: str) -> Callable[[int], Awaitable[int]]:
        service = self.service_name(model)

        async def step(index: int) -> int:
            entries, index = await self.consul.health(service, index)
            self.state.of(model).update(parse_entries(entries))
            return index

        return step

    async def _statuses(self, index: int) -> int:
        entries, index = await self.consul.kv_list(self.layout.status, index)
        statuses = {}
        for entry in entries:
            key = str(entry.get("Key", ""))
            try:
                statuses[key[len(self.layout.status) :]] = decode_value(entry)
            except (ValueError, TypeError):
                log.warning("status_value", key=key, problem="not JSON; ignored")
        self.state.statuses = statuses
        for name in statuses:
            if name in self.state.replicas:
                self.state.replicas[name].wake()  # held requests re-read the reason
        return index

    async def _every(self, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            await step()

    async def _probe(self) -> None:
        """GET /health of the registered, not yet passing replicas of models with held
        requests: one that answers 200 takes them before Consul's next check says so."""
        probes = []
        for model, counts in self.state.counts.items():
            if counts.queued > 0:
                for replica in self.state.of(model).starting():
                    probes.append((model, replica))
        results = await asyncio.gather(*(self._healthy(r.url) for _, r in probes))
        for (model, replica), ok in zip(probes, results, strict=True):
            if ok and not replica.usable:
                replica.probed_ok = True
                self.state.of(model).wake()

    async def _healthy(self, url: str) -> bool:
        try:
            reply = await self.upstream.get(f"{url}/health", timeout=self.config.probe_interval_s)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    async def _signals(self) -> None:
        """Each usable replica's queue and KV-cache usage, from its own metrics page."""
        targets = [r for reps in self.state.replicas.values() for r in reps.usable()]

        async def read(replica_url: str) -> tuple[float, float] | None:
            try:
                reply = await self.upstream.get(f"{replica_url}/metrics", timeout=1.0)
                values = parse_metrics(reply.text).values
            except (httpx.HTTPError, MetricsError):
                return None
            return values.get("waiting", 0.0), values.get("kv_cache", 0.0)

        results = await asyncio.gather(*(read(r.url) for r in targets))
        for replica, got in zip(targets, results, strict=True):
            replica.waiting, replica.kv_cache = got if got is not None else (0.0, 0.0)
