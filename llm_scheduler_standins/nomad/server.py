"""The Nomad stand-in's HTTP API (Starlette), over the in-memory `Cluster`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.faults import FaultMiddleware, Faults
from llm_scheduler_standins.fleet_model import HostVolume, Node
from llm_scheduler_standins.model_cache import StandinCaches, WeightsTiming
from llm_scheduler_standins.nomad import agent_routes, alloc_routes, job_routes, node_routes
from llm_scheduler_standins.nomad.acl import NomadACL
from llm_scheduler_standins.nomad.events import HEARTBEAT_S
from llm_scheduler_standins.nomad.http_helpers import (
    Handler,
    HttpError,
    json_response,
    namespace_of,
    text_response,
    token_of,
)
from llm_scheduler_standins.nomad.query import BadQuery, blocking_params
from llm_scheduler_standins.nomad.state import Cluster
from llm_scheduler_standins.registry import CheckStatus, ServiceRegistry
from llm_scheduler_standins.runner import RunningServer, serve_in_thread

if TYPE_CHECKING:
    from llm_scheduler_standins.model_server import ModelServers


class NomadStandin:
    """An in-memory Nomad server with the NVIDIA device plugin's view of `fleet`."""

    def __init__(
        self,
        fleet: list[Node],
        *,
        registry: ServiceRegistry | None = None,
        load_delay_s: float = 1.0,
        faults: Faults | None = None,
        acl: NomadACL | None = None,
        region: str = "global",
        datacenter: str = "dc1",
        seed: int | None = None,
        stop_delay_s: float = 0.0,
        reserved: dict[str, tuple[int, int]] | None = None,
        short_devices: bool = False,
        health_time_scale: float = 0.0,
        initial_check: CheckStatus = "passing",
        model_servers: ModelServers | None = None,
        weights: WeightsTiming | None = None,
    ) -> None:
        """`load_delay_s`: how long allocations stay pending; `stop_delay_s`: how long a
        stopped running allocation keeps ClientStatus running (0: complete at once);
        `seed`: makes the choice among free device instances reproducible; `reserved`: node
        id or "*" -> (CPU MHz, memory MiB) kept back from placement (ReservedResources);
        `short_devices`: place with fewer device instances than asked when a wished one is
        busy, as Nomad 1.9.0 to 1.11.0 did; `health_time_scale`: > 0 runs allocation health
        and deployments (healthy and progress deadlines) on Nomad's clock times this factor,
        0 makes running allocations healthy at once; `initial_check`: a new check's status;
        `weights`: the nodes' model caches (the fleet's `model_cache`) decide how much longer
        an allocation stays pending, downloading or loading its weights at these rates."""
        self.cluster = Cluster(
            fleet,
            registry=registry,
            load_delay_s=load_delay_s,
            region=region,
            seed=seed,
            stop_delay_s=stop_delay_s,
            reserved=reserved,
            short_devices=short_devices,
            health_time_scale=health_time_scale,
            initial_check=initial_check,
            model_servers=model_servers,
            caches=StandinCaches(fleet, weights) if weights is not None else None,
        )
        self.region = region
        self.datacenter = datacenter
        self.acl = acl
        self.faults = faults
        self._server: RunningServer | None = None
        self.heartbeat_s = HEARTBEAT_S
        app: Any = Starlette(routes=self._routes())
        if faults is not None:
            faults.on_index_reset(self.cluster.reset_index)
            app = FaultMiddleware(app, faults)
        self.app = app

    # ------------------------------------------------------------ lifecycle and helpers

    def start(self, port: int = 0) -> RunningServer:
        self._server = serve_in_thread(self.app, port, name="nomad-standin")
        return self._server

    def stop(self) -> None:
        self.cluster.close()
        if self._server is not None:
            self._server.stop()
            self._server = None

    close = stop  # the Consul stand-in's name for it

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("NomadStandin is not started")
        return self._server.url

    def set_gpu_health(self, node_id: str, device_id: str, healthy: bool) -> None:
        self.cluster.set_gpu_health(node_id, device_id, healthy)

    def set_host_volumes(self, node_id: str, volumes: dict[str, HostVolume]) -> None:
        self.cluster.set_host_volumes(node_id, volumes)

    def set_node_eligibility(self, node_id: str, eligible: bool) -> None:
        self.cluster.set_node_eligibility(node_id, eligible)

    def set_node_status(self, node_id: str, status: str) -> None:
        self.cluster.set_node_status(node_id, status)

    def drain_node(self, node_id: str, deadline_s: float, *, ignore_system: bool = False) -> None:
        """Start a drain as `nomad node drain -enable -deadline` does (negative: force)."""
        spec = {"Deadline": int(deadline_s * 1e9), "IgnoreSystemJobs": ignore_system}
        self.cluster.drain_node(node_id, spec, mark_eligible=False)

    def fail_allocation(self, alloc_id: str, *, reschedule: bool = True) -> str | None:
        return self.cluster.fail_allocation(alloc_id, reschedule=reschedule)

    def set_service_check(self, alloc_id: str, status: CheckStatus) -> None:
        self.cluster.set_service_check(alloc_id, status)

    def jobs(self, namespace: str = "*") -> list[dict[str, Any]]:
        return self.cluster.jobs(namespace)

    def allocations(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return self.cluster.allocs(job_id=job_id)

    # ------------------------------------------------------------ handlers, by module

    # node_routes.py
    _nodes = node_routes.nodes
    _node = node_routes.node
    _node_allocs = node_routes.node_allocs
    _node_eligibility = node_routes.node_eligibility
    _node_drain = node_routes.node_drain

    # job_routes.py
    _jobs = job_routes.jobs
    _register = job_routes.register
    _parse = job_routes.parse
    _job_or_404 = job_routes.job_or_404
    _job = job_routes.job
    _job_summary = job_routes.job_summary
    _deregister = job_routes.deregister
    _job_allocs = job_routes.job_allocs
    _job_evals = job_routes.job_evals
    _job_deps = job_routes.job_deps
    _job_dep = job_routes.job_dep
    _deployment = job_routes.deployment

    # alloc_routes.py
    _allocs = alloc_routes.allocs
    _readable_namespaces = alloc_routes.readable_namespaces
    _alloc = alloc_routes.alloc
    _alloc_stop = alloc_routes.alloc_stop
    _evals = alloc_routes.evals
    _eval = alloc_routes.eval
    _eval_allocs = alloc_routes.eval_allocs

    # agent_routes.py
    _event_stream = agent_routes.event_stream
    _leader = agent_routes.leader
    _regions = agent_routes.regions
    _agent_self = agent_routes.agent_self

    # ------------------------------------------------------------ plumbing

    def _routes(self) -> list[Route]:
        r = self._wrap
        return [
            Route("/v1/nodes", r(self._nodes), methods=["GET"]),
            Route("/v1/node/{node_id}", r(self._node), methods=["GET"]),
            Route("/v1/node/{node_id}/allocations", r(self._node_allocs), methods=["GET"]),
            Route(
                "/v1/node/{node_id}/eligibility", r(self._node_eligibility), methods=["POST", "PUT"]
            ),
            Route("/v1/node/{node_id}/drain", r(self._node_drain), methods=["POST", "PUT"]),
            Route("/v1/jobs", r(self._jobs), methods=["GET"]),
            Route("/v1/jobs", r(self._register), methods=["POST", "PUT"]),
            Route("/v1/jobs/parse", r(self._parse), methods=["POST", "PUT"]),
            Route("/v1/job/{job_id:path}/allocations", r(self._job_allocs), methods=["GET"]),
            Route("/v1/job/{job_id:path}/evaluations", r(self._job_evals), methods=["GET"]),
            Route("/v1/job/{job_id:path}/summary", r(self._job_summary), methods=["GET"]),
            Route("/v1/job/{job_id:path}/deployments", r(self._job_deps), methods=["GET"]),
            Route("/v1/job/{job_id:path}/deployment", r(self._job_dep), methods=["GET"]),
            Route("/v1/deployment/{dep_id}", r(self._deployment), methods=["GET"]),
            Route("/v1/job/{job_id:path}", r(self._job), methods=["GET"]),
            Route("/v1/job/{job_id:path}", r(self._register), methods=["POST", "PUT"]),
            Route("/v1/job/{job_id:path}", r(self._deregister), methods=["DELETE"]),
            Route("/v1/allocations", r(self._allocs), methods=["GET"]),
            Route("/v1/allocation/{alloc_id}", r(self._alloc), methods=["GET"]),
            Route("/v1/allocation/{alloc_id}/stop", r(self._alloc_stop), methods=["POST", "PUT"]),
            Route("/v1/evaluations", r(self._evals), methods=["GET"]),
            Route("/v1/evaluation/{eval_id}", r(self._eval), methods=["GET"]),
            Route("/v1/evaluation/{eval_id}/allocations", r(self._eval_allocs), methods=["GET"]),
            Route("/v1/event/stream", r(self._event_stream), methods=["GET"]),
            Route("/v1/status/leader", r(self._leader), methods=["GET"]),
            Route("/v1/regions", r(self._regions), methods=["GET"]),
            Route("/v1/agent/self", r(self._agent_self), methods=["GET"]),
        ]

    def _wrap(self, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            region = request.query_params.get("region")
            if region and region != self.region:
                return text_response(500, "No path to region")  # a real server would forward it
            try:
                return await handler(request)
            except HttpError as exc:
                return text_response(exc.status, exc.text)
            except BadQuery as exc:
                return text_response(400, str(exc))

        return endpoint

    def _check_ns(self, request: Request, capability: str, namespace: str | None = None) -> None:
        if self.acl is None:
            return
        error = self.acl.check_namespace(
            token_of(request), capability, namespace or namespace_of(request)
        )
        if error:
            raise HttpError(403, error)

    def _check_node(self, request: Request, write: bool = False) -> None:
        if self.acl is None:
            return
        error = self.acl.check_node(token_of(request), write=write)
        if error:
            raise HttpError(403, error)

    async def _blocking(
        self, request: Request, tables: tuple[str, ...], compute: Callable[[], Any]
    ) -> Response:
        """Answer now, or once the tables' index passes `?index=` (or `?wait=` runs out)."""
        min_index, wait = blocking_params(request.query_params)

        def read() -> tuple[int, Any]:
            return self.cluster.run_locked(lambda: (self.cluster.table_index(*tables), compute()))

        if min_index == 0:
            index, body = read()
            return json_response(body, index)
        # Nomad adds up to wait/16 of jitter so that many watchers do not return together.
        deadline = time.monotonic() + wait + random.uniform(0, wait / 16)
        with self.cluster.feed.subscribe() as sub:
            while True:
                remaining = deadline - time.monotonic()
                # Every write wakes every waiter: the body is built only for the answer (a
                # watcher of a table that did not move pays an index lookup, not a listing).
                if self.cluster.table_index(*tables) != min_index or remaining <= 0:
                    index, body = read()
                    return json_response(body, index)
                await sub.wait(remaining)

    # ------------------------------------------------------------ nodes

    # ------------------------------------------------------------ jobs

    # ------------------------------------------------------------ deployments

    # ------------------------------------------------------------ allocations

    # ------------------------------------------------------------ evaluations

    # ------------------------------------------------------------ events

    # ------------------------------------------------------------ agent
