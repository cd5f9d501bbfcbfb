"""The gateway's ASGI app: the OpenAI routes, `/v1/models`, `/healthz` and `/metrics`.

Everything that lives as long as the process (the pooled upstream client, the Consul client,
the watches, the demand writer) starts and stops with the app's lifespan; uvicorn drains the
requests in flight before the lifespan ends, and the demand session is destroyed last.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from scheduler.adapters.nomad_jobs import service_name
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.consul import AsyncConsul
from scheduler.gateway.demand import DemandWriter
from scheduler.gateway.metrics import GatewayMetrics
from scheduler.gateway.proxy import Proxy
from scheduler.gateway.state import GatewayState
from scheduler.gateway.watch import Watches

OPENAI_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


class Gateway:
    """The parts of one gateway process, reachable from tests and the bench."""

    def __init__(
        self, config: GatewayConfig, service_of: Callable[[str], str] = service_name
    ) -> None:
        self.config = config
        self.state = GatewayState()
        self.metrics = GatewayMetrics()
        self.service_of = service_of
        self.demand: DemandWriter | None = None
        self.watches: Watches | None = None
        self.proxy: Proxy | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        c = self.config
        # aiohttp on the request path: its pool finds an idle connection in constant time,
        # where httpx's checks every pooled connection on every request.
        upstream = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=c.max_connections, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=c.connect_timeout_s, sock_read=c.read_timeout_s
            ),
            auto_decompress=False,  # bytes pass through as the replica sent them
        )
        probes = httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=c.connect_timeout_s))
        consul = AsyncConsul(c.consul_addr, c.consul_token, c.watch_wait_s)
        self.proxy = Proxy(self.state, upstream, c, self.metrics)
        self.watches = Watches(self.state, consul, probes, c, self.metrics, self.service_of)
        self.demand = DemandWriter(self.state, consul, c, self.metrics)
        self.watches.start()
        self.demand.start()
        try:
            yield
        finally:
            self.state.draining = True
            await self.watches.stop()
            await self.demand.stop()  # last: Consul deletes this instance's demand key
            await upstream.close()
            await probes.aclose()
            await consul.close()

    async def openai(self, request: Request) -> Response:
        assert self.proxy is not None
        return await self.proxy.handle(request)

    async def models(self, request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "llm-scheduler",
             "ready": bool(self.state.of(name).usable())}
            for name in sorted(self.state.models)
        ]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def healthz(self, request: Request) -> Response:
        """200 while requests can be routed, with what is degraded (Consul unreachable: the
        last known replicas are used; demand writes failing: retried); 503 before the
        catalog was ever read, and while draining."""
        failures = dict(self.state.consul.failures)
        ready = self.state.catalog_read and not self.state.draining
        body = {
            "status": ("degraded" if failures else "ok") if ready else "unavailable",
            "catalog_read": self.state.catalog_read,
            "draining": self.state.draining,
            "models": len(self.state.models),
            "consul": "reachable" if not failures else "unreachable or failing",
            "failures": failures,
            "demand_key": self.demand.key if self.demand else None,
            "uptime_s": round(time.monotonic() - self.state.started, 3),
        }
        return JSONResponse(body, 200 if ready else 503)

    async def metrics_page(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def app(self) -> Starlette:
        routes = [Route(p, self.openai, methods=["POST"]) for p in OPENAI_ROUTES]
        routes += [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics_page, methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=self.lifespan)
