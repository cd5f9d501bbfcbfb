"""The Nomad stand-in's /v1/allocations, /v1/allocation/<id> (and stop), /v1/evaluations,
/v1/evaluation/<id> (and its allocations).

Handlers of NomadStandin (server.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from llm_scheduler_standins.nomad.http_helpers import (
    HttpError,
    found,
    json_response,
    namespace_of,
    token_of,
)
from llm_scheduler_standins.nomad.query import compile_filter, parse_bool
from llm_scheduler_standins.nomad.views import eval_stub

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.server import NomadStandin


async def allocs(server: NomadStandin, request: Request) -> Response:
    namespace = namespace_of(request)
    visible = server._readable_namespaces(request, namespace)
    params = request.query_params
    resources = parse_bool(params, "resources")
    task_states = parse_bool(params, "task_states", default=True)
    prefix = params.get("prefix") or ""
    keep = compile_filter(params.get("filter"))
    return await server._blocking(
        request,
        ("allocs",),
        lambda: [
            s
            for s in server.cluster.alloc_stubs(
                namespace=namespace,
                prefix=prefix,
                resources=resources,
                task_states=task_states,
                keep=visible,
            )
            if keep(s)
        ],
    )


def readable_namespaces(
    server: NomadStandin, request: Request, namespace: str
) -> Callable[[str], bool]:
    """Which namespaces' objects a listing shows. With `*`, nomad/alloc_endpoint.go List
    answers 403 only when no namespace grants read-job, and otherwise filters the rows to
    the namespaces that do (allowedNSes), silently."""
    if namespace != "*" or server.acl is None:
        server._check_ns(request, "read-job", namespace)
        return lambda _: True
    token = server.acl.token(token_of(request))
    if token is None:
        raise HttpError(403, "ACL token not found")
    if not token.allows_any("read-job"):
        raise HttpError(403, "Permission denied")
    return lambda ns: token.allows("read-job", ns)


async def alloc(server: NomadStandin, request: Request) -> Response:
    alloc_id = request.path_params["alloc_id"]
    alloc = server.cluster.alloc(alloc_id)
    if alloc is None:
        raise HttpError(404, "alloc not found")
    server._check_ns(request, "read-job", alloc["Namespace"])
    return await server._blocking(
        request, ("allocs",), lambda: found(server.cluster.alloc(alloc_id), "alloc not found")
    )


async def alloc_stop(server: NomadStandin, request: Request) -> Response:
    alloc_id = request.path_params["alloc_id"]
    alloc = server.cluster.alloc(alloc_id)
    if alloc is None:
        raise HttpError(404, "alloc not found")
    server._check_ns(request, "alloc-lifecycle", alloc["Namespace"])
    result = server.cluster.stop_allocation(alloc_id)
    return json_response(result, result["Index"])


async def evals(server: NomadStandin, request: Request) -> Response:
    namespace = namespace_of(request)
    server._check_ns(request, "read-job", None if namespace == "*" else namespace)
    job_id = request.query_params.get("job") or None
    return await server._blocking(
        request,
        ("evals",),
        lambda: [
            eval_stub(e) for e in server.cluster.evaluations(namespace=namespace, job_id=job_id)
        ],
    )


def _readable_eval(server: NomadStandin, request: Request) -> str:
    """The path's evaluation id, once it is known to exist and the token may read its job."""
    eval_id = request.path_params["eval_id"]
    evaluation = server.cluster.evaluation(eval_id)
    if evaluation is None:
        raise HttpError(404, "eval not found")
    server._check_ns(request, "read-job", evaluation["Namespace"])
    return eval_id


async def eval(server: NomadStandin, request: Request) -> Response:
    eval_id = _readable_eval(server, request)
    return await server._blocking(
        request,
        ("evals",),
        lambda: found(server.cluster.evaluation(eval_id), "eval not found"),
    )


async def eval_allocs(server: NomadStandin, request: Request) -> Response:
    eval_id = _readable_eval(server, request)
    return await server._blocking(
        request,
        ("allocs",),
        lambda: server.cluster.alloc_stubs(eval_id=eval_id),
    )
