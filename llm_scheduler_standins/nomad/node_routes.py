"""The Nomad stand-in's /v1/nodes, /v1/node/<id> and its allocations, eligibility and drain.

Handlers of NomadStandin (server.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from llm_scheduler_standins.nomad.http_helpers import (
    HttpError,
    found,
    json_body,
    json_response,
)
from llm_scheduler_standins.nomad.query import compile_filter, parse_bool

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.server import NomadStandin


async def nodes(server: NomadStandin, request: Request) -> Response:
    server._check_node(request)
    params = request.query_params
    resources = parse_bool(params, "resources")
    os_attrs = parse_bool(params, "os")
    prefix = params.get("prefix") or ""
    keep = compile_filter(params.get("filter"))
    return await server._blocking(
        request,
        ("nodes",),
        lambda: [
            n
            for n in server.cluster.nodes_json(
                resources=resources, os_attrs=os_attrs, prefix=prefix
            )
            if keep(n)
        ],
    )


async def node(server: NomadStandin, request: Request) -> Response:
    server._check_node(request)
    node_id = request.path_params["node_id"]
    if server.cluster.node_json(node_id) is None:
        raise HttpError(404, "node not found")
    return await server._blocking(
        request, ("nodes",), lambda: found(server.cluster.node_json(node_id), "node not found")
    )


async def node_allocs(server: NomadStandin, request: Request) -> Response:
    server._check_node(request)
    server._check_ns(request, "read-job")
    node_id = request.path_params["node_id"]
    if server.cluster.node_json(node_id) is None:
        raise HttpError(404, "node not found")
    return await server._blocking(
        request, ("allocs",), lambda: server.cluster.allocs(node_id=node_id)
    )


async def node_eligibility(server: NomadStandin, request: Request) -> Response:
    server._check_node(request, write=True)
    node_id = request.path_params["node_id"]
    body = await json_body(request) or {}
    value = body.get("Eligibility")
    if value not in ("eligible", "ineligible"):
        raise HttpError(400, f"invalid scheduling eligibility {value!r}")
    try:
        server.cluster.set_node_eligibility(node_id, value == "eligible")
    except KeyError as exc:
        raise HttpError(404, "node not found") from exc
    index = server.cluster.table_index("nodes")
    return json_response(
        {"EvalCreateIndex": 0, "EvalIDs": None, "Index": index, "NodeModifyIndex": index}, index
    )


async def node_drain(server: NomadStandin, request: Request) -> Response:
    server._check_node(request, write=True)
    node_id = request.path_params["node_id"]
    body = await json_body(request) or {}
    spec = body.get("DrainSpec")
    if spec is not None and not isinstance(spec, dict):
        raise HttpError(400, "DrainSpec must be an object or null")
    meta = body.get("Meta") if isinstance(body.get("Meta"), dict) else None
    try:
        eval_ids = server.cluster.drain_node(
            node_id, spec, mark_eligible=bool(body.get("MarkEligible")), meta=meta
        )
    except KeyError as exc:
        raise HttpError(404, "node not found") from exc
    index = server.cluster.table_index("nodes")
    return json_response(
        {
            "EvalCreateIndex": index if eval_ids else 0,
            "EvalIDs": eval_ids or None,
            "Index": index,
            "NodeModifyIndex": index,
        },
        index,
    )
