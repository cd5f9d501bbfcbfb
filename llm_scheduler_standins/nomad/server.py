"""The Nomad stand-in's HTTP API (Starlette), over the in-memory `Cluster`."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from llm_scheduler_standins.faults import FaultMiddleware, Faults
from llm_scheduler_standins.fleet_model import Node
from llm_scheduler_standins.nomad.acl import NomadACL
from llm_scheduler_standins.nomad.events import HEARTBEAT_S, parse_topics
from llm_scheduler_standins.nomad.hcl import HclError, parse_job
from llm_scheduler_standins.nomad.jobs import JobDecodeError, JobValidationError
from llm_scheduler_standins.nomad.query import BadQuery, blocking_params, compile_filter, parse_bool
from llm_scheduler_standins.nomad.state import CasError, Cluster
from llm_scheduler_standins.nomad.views import eval_stub
from llm_scheduler_standins.registry import CheckStatus, ServiceRegistry
from llm_scheduler_standins.runner import RunningServer, serve_in_thread

if TYPE_CHECKING:
    from llm_scheduler_standins.model_server import ModelServers

Handler = Callable[[Request], Awaitable[Response]]


class HttpError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _text(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


def _json(body: Any, index: int | None = None) -> Response:
    headers = {"X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}
    if index is not None:
        headers["X-Nomad-Index"] = str(max(index, 1))
    return Response(json.dumps(body), media_type="application/json", headers=headers)


def _token(request: Request) -> str | None:
    token = request.headers.get("x-nomad-token")
    if token:
        return token
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def _namespace(request: Request) -> str:
    return request.query_params.get("namespace") or "default"


def _found(value: Any, not_found: str) -> Any:
    """A blocking read whose object went away while it waited answers 404, not null."""
    if value is None:
        raise HttpError(404, not_found)
    return value


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"Request body is not valid JSON: {exc}") from exc


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
    ) -> None:
        """`load_delay_s`: how long allocations stay pending; `stop_delay_s`: how long a
        stopped running allocation keeps ClientStatus running (0: complete at once);
        `seed`: makes the choice among free device instances reproducible; `reserved`: node
        id or "*" -> (CPU MHz, memory MiB) kept back from placement (ReservedResources);
        `short_devices`: place with fewer device instances than asked when a wished one is
        busy, as Nomad 1.9.0 to 1.11.0 did; `health_time_scale`: > 0 runs allocation health
        and deployments (healthy and progress deadlines) on Nomad's clock times this factor,
        0 makes running allocations healthy at once; `initial_check`: a new check's status."""
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
                return _text(500, "No path to region")  # a real server would forward it
            try:
                return await handler(request)
            except HttpError as exc:
                return _text(exc.status, exc.text)
            except BadQuery as exc:
                return _text(400, str(exc))

        return endpoint

    def _check_ns(self, request: Request, capability: str, namespace: str | None = None) -> None:
        if self.acl is None:
            return
        error = self.acl.check_namespace(
            _token(request), capability, namespace or _namespace(request)
        )
        if error:
            raise HttpError(403, error)

    def _check_node(self, request: Request, write: bool = False) -> None:
        if self.acl is None:
            return
        error = self.acl.check_node(_token(request), write=write)
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
            return _json(body, index)
        # Nomad adds up to wait/16 of jitter so that many watchers do not return together.
        deadline = time.monotonic() + wait + random.uniform(0, wait / 16)
        with self.cluster.feed.subscribe() as sub:
            while True:
                remaining = deadline - time.monotonic()
                # Every write wakes every waiter: the body is built only for the answer (a
                # watcher of a table that did not move pays an index lookup, not a listing).
                if self.cluster.table_index(*tables) != min_index or remaining <= 0:
                    index, body = read()
                    return _json(body, index)
                await sub.wait(remaining)

    # ------------------------------------------------------------ nodes

    async def _nodes(self, request: Request) -> Response:
        self._check_node(request)
        params = request.query_params
        resources = parse_bool(params, "resources")
        os_attrs = parse_bool(params, "os")
        prefix = params.get("prefix") or ""
        keep = compile_filter(params.get("filter"))
        return await self._blocking(
            request,
            ("nodes",),
            lambda: [
                n
                for n in self.cluster.nodes_json(
                    resources=resources, os_attrs=os_attrs, prefix=prefix
                )
                if keep(n)
            ],
        )

    async def _node(self, request: Request) -> Response:
        self._check_node(request)
        node_id = request.path_params["node_id"]
        if self.cluster.node_json(node_id) is None:
            raise HttpError(404, "node not found")
        return await self._blocking(
            request, ("nodes",), lambda: _found(self.cluster.node_json(node_id), "node not found")
        )

    async def _node_allocs(self, request: Request) -> Response:
        self._check_node(request)
        self._check_ns(request, "read-job")
        node_id = request.path_params["node_id"]
        if self.cluster.node_json(node_id) is None:
            raise HttpError(404, "node not found")
        return await self._blocking(
            request, ("allocs",), lambda: self.cluster.allocs(node_id=node_id)
        )

    async def _node_eligibility(self, request: Request) -> Response:
        self._check_node(request, write=True)
        node_id = request.path_params["node_id"]
        body = await _body(request) or {}
        value = body.get("Eligibility")
        if value not in ("eligible", "ineligible"):
            raise HttpError(400, f"invalid scheduling eligibility {value!r}")
        try:
            self.cluster.set_node_eligibility(node_id, value == "eligible")
        except KeyError as exc:
            raise HttpError(404, "node not found") from exc
        index = self.cluster.table_index("nodes")
        return _json(
            {"EvalCreateIndex": 0, "EvalIDs": None, "Index": index, "NodeModifyIndex": index}, index
        )

    async def _node_drain(self, request: Request) -> Response:
        self._check_node(request, write=True)
        node_id = request.path_params["node_id"]
        body = await _body(request) or {}
        spec = body.get("DrainSpec")
        if spec is not None and not isinstance(spec, dict):
            raise HttpError(400, "DrainSpec must be an object or null")
        meta = body.get("Meta") if isinstance(body.get("Meta"), dict) else None
        try:
            eval_ids = self.cluster.drain_node(
                node_id, spec, mark_eligible=bool(body.get("MarkEligible")), meta=meta
            )
        except KeyError as exc:
            raise HttpError(404, "node not found") from exc
        index = self.cluster.table_index("nodes")
        return _json(
            {
                "EvalCreateIndex": index if eval_ids else 0,
                "EvalIDs": eval_ids or None,
                "Index": index,
                "NodeModifyIndex": index,
            },
            index,
        )

    # ------------------------------------------------------------ jobs

    async def _jobs(self, request: Request) -> Response:
        namespace = _namespace(request)
        self._check_ns(request, "list-jobs", None if namespace == "*" else namespace)
        params = request.query_params
        prefix = params.get("prefix") or ""
        meta = parse_bool(params, "meta")
        keep = compile_filter(params.get("filter"))

        def compute() -> list[dict[str, Any]]:
            return [s for s in self.cluster.job_stubs(namespace, prefix, meta=meta) if keep(s)]

        return await self._blocking(request, ("jobs", "allocs", "evals"), compute)

    async def _register(self, request: Request) -> Response:
        body = await _body(request)
        if not isinstance(body, dict) or not body.get("Job"):
            raise HttpError(400, "Job must be specified")
        job = body["Job"]
        if not isinstance(job, dict):
            raise HttpError(400, "json: cannot unmarshal into Go struct field of type api.Job")
        path_id = request.path_params.get("job_id")
        if path_id is not None:
            if not job.get("ID"):
                raise HttpError(400, "Job ID hasn't been provided")
            if job["ID"] != path_id:
                raise HttpError(400, "Job ID does not match name")
        namespace = job.get("Namespace") or _namespace(request)
        self._check_ns(request, "submit-job", namespace)
        try:
            result = self.cluster.register(
                job,
                enforce_index=bool(body.get("EnforceIndex")),
                job_modify_index=int(body.get("JobModifyIndex") or 0),
                namespace=namespace,
            )
        except (JobValidationError, CasError) as exc:
            raise HttpError(500, str(exc)) from exc
        except JobDecodeError as exc:
            raise HttpError(400, str(exc)) from exc
        return _json(result, result["Index"])

    async def _parse(self, request: Request) -> Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("JobHCL"), str):
            raise HttpError(400, "Job must be specified")
        if self.acl is not None:
            token = self.acl.token(_token(request))
            if token is None:
                raise HttpError(403, "ACL token not found")
            ns = _namespace(request)
            if not (token.allows("parse-job", ns) or token.allows("submit-job", ns)):
                raise HttpError(403, "Permission denied")
        variables = body.get("Variables") or ""
        if not isinstance(variables, str):
            raise HttpError(400, "Variables must be a string of HCL assignments")
        try:
            job = parse_job(
                body["JobHCL"],
                variables=variables,
                canonicalize=bool(body.get("Canonicalize")),
                region=self.region,
            )
        except HclError as exc:
            raise HttpError(400, f"Failed to parse job: {exc}") from exc
        return _json(job)

    def _job_or_404(self, request: Request) -> tuple[str, str]:
        namespace = _namespace(request)
        job_id = request.path_params["job_id"]
        if self.cluster.job(namespace, job_id) is None:
            raise HttpError(404, "job not found")
        return namespace, job_id

    async def _job(self, request: Request) -> Response:
        self._check_ns(request, "read-job")
        namespace, job_id = self._job_or_404(request)
        return await self._blocking(
            request, ("jobs",), lambda: _found(self.cluster.job(namespace, job_id), "job not found")
        )

    async def _job_summary(self, request: Request) -> Response:
        self._check_ns(request, "read-job")
        namespace, job_id = self._job_or_404(request)

        def compute() -> Any:
            return self.cluster.job_summary(namespace, job_id)

        return await self._blocking(request, ("jobs", "allocs", "evals"), compute)

    async def _deregister(self, request: Request) -> Response:
        namespace = _namespace(request)
        self._check_ns(request, "submit-job", namespace)
        purge = parse_bool(request.query_params, "purge")
        result = self.cluster.deregister(namespace, request.path_params["job_id"], purge=purge)
        return _json(result, result["EvalCreateIndex"] or self.cluster.table_index("jobs"))

    async def _job_allocs(self, request: Request) -> Response:
        self._check_ns(request, "read-job")
        namespace = _namespace(request)
        job_id = request.path_params["job_id"]
        return await self._blocking(
            request,
            ("allocs",),
            lambda: self.cluster.alloc_stubs(namespace=namespace, job_id=job_id),
        )

    async def _job_evals(self, request: Request) -> Response:
        self._check_ns(request, "read-job")
        namespace = _namespace(request)
        job_id = request.path_params["job_id"]
        return await self._blocking(
            request,
            ("evals",),
            lambda: self.cluster.evaluations(namespace=namespace, job_id=job_id),
        )

    # ------------------------------------------------------------ deployments

    async def _job_deps(self, request: Request) -> Response:
        self._check_ns(request, "read-job")
        namespace, job_id = self._job_or_404(request)
        return await self._blocking(
            request,
            ("deployments",),
            lambda: self.cluster.deployments(namespace=namespace, job_id=job_id),
        )

    async def _job_dep(self, request: Request) -> Response:
        """The latest deployment, or null (nomad/job_endpoint.go LatestDeployment)."""
        self._check_ns(request, "read-job")
        namespace, job_id = self._job_or_404(request)

        def latest() -> Any:
            found = self.cluster.deployments(namespace=namespace, job_id=job_id)
            return found[0] if found else None

        return await self._blocking(request, ("deployments",), latest)

    async def _deployment(self, request: Request) -> Response:
        dep_id = request.path_params["dep_id"]
        dep = self.cluster.deployment(dep_id)
        if dep is None:
            raise HttpError(404, "deployment not found")
        self._check_ns(request, "read-job", dep["Namespace"])
        return await self._blocking(
            request,
            ("deployments",),
            lambda: _found(self.cluster.deployment(dep_id), "deployment not found"),
        )

    # ------------------------------------------------------------ allocations

    async def _allocs(self, request: Request) -> Response:
        namespace = _namespace(request)
        visible = self._readable_namespaces(request, namespace)
        params = request.query_params
        resources = parse_bool(params, "resources")
        task_states = parse_bool(params, "task_states", default=True)
        prefix = params.get("prefix") or ""
        keep = compile_filter(params.get("filter"))
        return await self._blocking(
            request,
            ("allocs",),
            lambda: [
                s
                for s in self.cluster.alloc_stubs(
                    namespace=namespace,
                    prefix=prefix,
                    resources=resources,
                    task_states=task_states,
                    keep=visible,
                )
                if keep(s)
            ],
        )

    def _readable_namespaces(self, request: Request, namespace: str) -> Callable[[str], bool]:
        """Which namespaces' objects a listing shows. With `*`, nomad/alloc_endpoint.go List
        answers 403 only when no namespace grants read-job, and otherwise filters the rows to
        the namespaces that do (allowedNSes), silently."""
        if namespace != "*" or self.acl is None:
            self._check_ns(request, "read-job", namespace)
            return lambda _: True
        token = self.acl.token(_token(request))
        if token is None:
            raise HttpError(403, "ACL token not found")
        if not token.allows_any("read-job"):
            raise HttpError(403, "Permission denied")
        return lambda ns: token.allows("read-job", ns)

    async def _alloc(self, request: Request) -> Response:
        alloc_id = request.path_params["alloc_id"]
        alloc = self.cluster.alloc(alloc_id)
        if alloc is None:
            raise HttpError(404, "alloc not found")
        self._check_ns(request, "read-job", alloc["Namespace"])
        return await self._blocking(
            request, ("allocs",), lambda: _found(self.cluster.alloc(alloc_id), "alloc not found")
        )

    async def _alloc_stop(self, request: Request) -> Response:
        alloc_id = request.path_params["alloc_id"]
        alloc = self.cluster.alloc(alloc_id)
        if alloc is None:
            raise HttpError(404, "alloc not found")
        self._check_ns(request, "alloc-lifecycle", alloc["Namespace"])
        result = self.cluster.stop_allocation(alloc_id)
        return _json(result, result["Index"])

    # ------------------------------------------------------------ evaluations

    async def _evals(self, request: Request) -> Response:
        namespace = _namespace(request)
        self._check_ns(request, "read-job", None if namespace == "*" else namespace)
        job_id = request.query_params.get("job") or None
        return await self._blocking(
            request,
            ("evals",),
            lambda: [
                eval_stub(e) for e in self.cluster.evaluations(namespace=namespace, job_id=job_id)
            ],
        )

    async def _eval(self, request: Request) -> Response:
        eval_id = request.path_params["eval_id"]
        evaluation = self.cluster.evaluation(eval_id)
        if evaluation is None:
            raise HttpError(404, "eval not found")
        self._check_ns(request, "read-job", evaluation["Namespace"])
        return await self._blocking(
            request,
            ("evals",),
            lambda: _found(self.cluster.evaluation(eval_id), "eval not found"),
        )

    async def _eval_allocs(self, request: Request) -> Response:
        eval_id = request.path_params["eval_id"]
        evaluation = self.cluster.evaluation(eval_id)
        if evaluation is None:
            raise HttpError(404, "eval not found")
        self._check_ns(request, "read-job", evaluation["Namespace"])
        return await self._blocking(
            request,
            ("allocs",),
            lambda: self.cluster.alloc_stubs(eval_id=eval_id),
        )

    # ------------------------------------------------------------ events

    async def _event_stream(self, request: Request) -> Response:
        topics = parse_topics(request.query_params.getlist("topic"))
        namespace = _namespace(request)
        if self.acl is not None:
            token = self.acl.token(_token(request))
            if token is None:
                raise HttpError(403, "ACL token not found")
            # Nomad wants a management token for `*:*`; per-topic reads need read-job.
            if not token.management and ("*" in topics or not token.allows("read-job", namespace)):
                raise HttpError(403, "Permission denied")
        raw_index = request.query_params.get("index") or "0"
        try:
            start = int(raw_index)
        except ValueError as exc:
            raise HttpError(400, "Invalid index") from exc
        heartbeat = self.heartbeat_s

        async def frames() -> AsyncIterator[bytes]:
            cursor = max(start - 1, 0) if start else self.cluster.events.last_index()
            yield b"{}\n"
            with self.cluster.feed.subscribe() as sub:
                while True:
                    for frame in self.cluster.events.since(cursor, topics, namespace):
                        cursor = frame["Index"]
                        yield json.dumps(frame).encode() + b"\n"
                    if not await sub.wait(heartbeat):
                        yield b"{}\n"

        return StreamingResponse(frames(), media_type="application/json")

    # ------------------------------------------------------------ agent

    async def _leader(self, request: Request) -> Response:
        return _json("127.0.0.1:4647")

    async def _regions(self, request: Request) -> Response:
        return _json([self.region])

    async def _agent_self(self, request: Request) -> Response:
        return _json(
            {
                "config": {
                    "Region": self.region,
                    "Datacenter": self.datacenter,
                    "Version": {"Version": "1.10.5"},
                },
                "member": {
                    "Name": "standin.global",
                    "Addr": "127.0.0.1",
                    "Port": 4648,
                    "Tags": {"region": self.region, "dc": self.datacenter},
                },
                "stats": {},
            }
        )
