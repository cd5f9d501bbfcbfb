"""ConsulStandin: the Starlette app, its fault middleware, and the ServiceRegistry for Nomad."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.acl import ConsulACL
from llm_scheduler_standins.consul.agent_routes import AgentRoutes
from llm_scheduler_standins.consul.catalog_routes import CatalogRoutes
from llm_scheduler_standins.consul.context import DATACENTER, RouteContext
from llm_scheduler_standins.consul.httpkit import ConsulHTTPError, text_response
from llm_scheduler_standins.consul.kv_routes import KVRoutes
from llm_scheduler_standins.consul.session_routes import SessionRoutes
from llm_scheduler_standins.consul.store import ConsulStore
from llm_scheduler_standins.consul.tables import CatalogService
from llm_scheduler_standins.consul.txn_routes import TxnRoutes
from llm_scheduler_standins.faults import FaultMiddleware, Faults
from llm_scheduler_standins.registry import CheckStatus, ServiceInstance, ServiceRegistry
from llm_scheduler_standins.runner import RunningServer, serve_in_thread

Endpoint = Callable[[Request], Awaitable[Response]]


NO_DC_PATH = "No path to datacenter"  # agent/structs/errors.go ErrNoDCPath


def _answer_errors(endpoint: Endpoint, *, local_only: bool) -> Endpoint:
    async def wrapped(request: Request) -> Response:
        # A server forwards `?dc=` to another datacenter's servers (agent/consul/rpc.go
        # forwardDC); this one knows none, so any other dc has no path.
        dc = request.query_params.get("dc")
        if local_only and dc and dc != DATACENTER:
            return text_response(500, NO_DC_PATH)
        try:
            return await endpoint(request)
        except ConsulHTTPError as error:
            return text_response(error.status, error.text)

    return wrapped


class ConsulStandin(ServiceRegistry):
    """An in-memory Consul agent + server that py-consul and httpx talk to over HTTP.

    Implements llm_scheduler_standins.registry.ServiceRegistry; all methods are thread-safe.
    """

    def __init__(
        self,
        *,
        acl: ConsulACL | None = None,
        faults: Faults | None = None,
        max_wait_s: float = 600,
        jitter: bool = True,
        session_ttl_multiplier: float = 2.0,
        node_name: str = "consul-standin",
    ) -> None:
        self.store = ConsulStore(
            session_ttl_multiplier=session_ttl_multiplier, agent_node=node_name
        )
        self.faults = faults or Faults()
        self.faults.on_index_reset(self.store.reset_index)
        self.acl = acl
        ctx = RouteContext(self.store, acl, max_wait_s, jitter)
        routes: list[Route] = []
        for group in (
            KVRoutes(ctx),
            SessionRoutes(ctx),
            TxnRoutes(ctx),
            CatalogRoutes(ctx),
            AgentRoutes(ctx),
        ):
            routes.extend(group.routes())
        self._starlette = Starlette(routes=[_wrap(r) for r in routes])
        self.app = FaultMiddleware(self._starlette, self.faults)
        self._servers: list[RunningServer] = []

    def start(self, port: int = 0) -> RunningServer:
        server = serve_in_thread(self.app, port, name="consul-standin")
        self._servers.append(server)
        return server

    def close(self) -> None:
        """Stop every server started here and the session TTL timers."""
        for server in self._servers:
            server.stop()
        self._servers.clear()
        self.store.close()

    # -- direct helpers for tests and the demo -------------------------------------------

    @property
    def index(self) -> int:
        return self.store.index

    def kv_put(self, key: str, value: bytes | str) -> None:
        self.store.kv_set(key, value.encode() if isinstance(value, str) else value)

    def kv_delete(self, key: str, *, recurse: bool = False) -> None:
        self.store.kv_delete(key, recurse=recurse)

    def register_node(self, name: str) -> None:
        """Register a catalog node (as its own Consul agent would), e.g. to own sessions."""
        with self.store.lock:
            self.store.extra_nodes.add(name)

    def kv_get(self, key: str) -> bytes | None:
        with self.store.lock:
            entry = self.store.kv.entries.get(key)
            return entry.value if entry else None

    # -- ServiceRegistry -----------------------------------------------------------------

    def register_service(self, instance: ServiceInstance) -> None:
        self.store.register_service(
            CatalogService(
                id=instance.id,
                name=instance.name,
                node_id=instance.node_id,
                node_name=instance.node_name,
                address=instance.address,
                port=instance.port,
                tags=tuple(instance.tags),
                meta=dict(instance.meta),
                check_status=instance.check_status,
                create_index=0,
                modify_index=0,
                check_modify_index=0,
            )
        )

    def set_check_status(self, service_id: str, status: CheckStatus) -> None:
        self.store.set_check_status(service_id, status)

    def deregister_service(self, service_id: str) -> None:
        self.store.deregister_service(service_id)


def _wrap(route: Route) -> Route:
    methods = sorted(route.methods - {"HEAD"}) if route.methods else None
    # /v1/agent/* answers for this agent only and ignores `dc`.
    local_only = not route.path.startswith("/v1/agent/")
    return Route(route.path, _answer_errors(route.endpoint, local_only=local_only), methods=methods)
