"""/v1/session/*: create, renew, destroy, info, list, node (agent/session_endpoint.go semantics)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.context import RouteContext
from llm_scheduler_standins.consul.durations import SECOND_NS, parse_go_duration
from llm_scheduler_standins.consul.httpkit import (
    ConsulHTTPError,
    blocking_query,
    json_response,
    read_meta,
)
from llm_scheduler_standins.consul.tables import Session

DEFAULT_LOCK_DELAY_NS = 15 * SECOND_NS
LOCK_DELAY_SECONDS_THRESHOLD = 1000  # smaller numbers are taken as seconds
TTL_MIN_NS = 10 * SECOND_NS
TTL_MAX_NS = 86400 * SECOND_NS
TTL_BOUNDS_TEXT = "10s=24h0m0s"
MISSING_NODE = "Missing node registration"  # agent/structs/errors.go ErrMissingNode


def session_json(session: Session) -> dict[str, Any]:
    return {
        "ID": session.id,
        "Name": session.name,
        "Node": session.node,
        "LockDelay": session.lock_delay_ns,
        "Behavior": session.behavior,
        "TTL": session.ttl,
        "NodeChecks": list(session.node_checks),
        "ServiceChecks": session.service_checks,
        "CreateIndex": session.create_index,
        "ModifyIndex": session.modify_index,
    }


def _decode_failed(reason: str) -> ConsulHTTPError:
    return ConsulHTTPError(400, f"Request decode failed: {reason}")


def parse_lock_delay(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise _decode_failed(f"LockDelay: unsupported value {raw!r}")
    if isinstance(raw, str):
        try:
            delay = parse_go_duration(raw)
        except ValueError as error:
            raise _decode_failed(str(error)) from None
    else:
        delay = int(raw)
    return delay * SECOND_NS if delay < LOCK_DELAY_SECONDS_THRESHOLD else delay


def parse_ttl(raw: Any) -> tuple[str, int]:
    if raw is None or raw == "":
        return "", 0
    if not isinstance(raw, str):
        raise _decode_failed(f"TTL: expected a duration string, got {raw!r}")
    try:
        ttl_ns = parse_go_duration(raw)
    except ValueError as error:
        raise ConsulHTTPError(500, f"Session TTL '{raw}' invalid: {error}") from None
    if ttl_ns != 0 and not TTL_MIN_NS <= ttl_ns <= TTL_MAX_NS:
        raise ConsulHTTPError(
            500, f"Invalid Session TTL '{ttl_ns}', must be between [{TTL_BOUNDS_TEXT}]"
        )
    return raw, ttl_ns


def _string_list(raw: Any, field: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise _decode_failed(f"{field}: expected a list of strings, got {raw!r}")
    return list(raw)


class SessionRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/v1/session/create", self.create, methods=["PUT"]),
            Route("/v1/session/renew/{id}", self.renew, methods=["PUT"]),
            Route("/v1/session/destroy/{id}", self.destroy, methods=["PUT"]),
            Route("/v1/session/info/{id}", self.info, methods=["GET"]),
            Route("/v1/session/list", self.list_all, methods=["GET"]),
            Route("/v1/session/node/{node}", self.list_node, methods=["GET"]),
        ]

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise _decode_failed(str(error)) from None
        if not isinstance(body, dict):
            raise _decode_failed(f"expected a JSON object, got {type(body).__name__}")
        # Consul decodes session bodies case-insensitively; py-consul sends lowercase keys.
        return {str(k).lower(): v for k, v in body.items()}

    def _require_write(self, request: Request, node: str) -> None:
        caller = self.ctx.caller(request)
        if not caller.can_write_session():
            raise caller.denied("session:write", node)

    async def create(self, request: Request) -> Response:
        body = await self._body(request)
        node = body.get("node") or self.ctx.store.agent_node
        if not isinstance(node, str):
            raise _decode_failed(f"Node: expected a string, got {node!r}")
        self._require_write(request, node)
        # agent/consul/state/session.go sessionCreateTxn: the node must be in the catalog.
        if not self.ctx.store.node_registered(node):
            raise ConsulHTTPError(500, MISSING_NODE)
        name = body.get("name") or ""
        if not isinstance(name, str):
            raise _decode_failed(f"Name: expected a string, got {name!r}")
        behavior = body.get("behavior") or "release"
        if behavior not in ("release", "delete"):
            raise ConsulHTTPError(500, f"Invalid Behavior setting '{behavior}'")
        lock_delay = (
            parse_lock_delay(body["lockdelay"]) if "lockdelay" in body else DEFAULT_LOCK_DELAY_NS
        )
        ttl, ttl_ns = parse_ttl(body.get("ttl"))
        # Any `checks` or `nodechecks` key, even an empty list, replaces the default serfHealth.
        if "checks" in body or "nodechecks" in body:
            checks = _string_list(body.get("checks"), "Checks")
            checks += _string_list(body.get("nodechecks"), "NodeChecks")
        else:
            checks = ["serfHealth"]
        service_checks = body.get("servicechecks")
        if service_checks is not None and not isinstance(service_checks, list):
            raise _decode_failed(f"ServiceChecks: expected a list, got {service_checks!r}")
        session = self.ctx.store.create_session(
            name=name,
            node=node,
            lock_delay_ns=lock_delay,
            behavior=behavior,
            ttl=ttl,
            ttl_ns=ttl_ns,
            node_checks=checks,
            service_checks=service_checks or None,
        )
        return json_response({"ID": session.id}, request, self.ctx.acl_headers())

    async def renew(self, request: Request) -> Response:
        session_id = request.path_params["id"]
        existing = self.ctx.store.sessions.get(session_id)
        self._require_write(request, existing.node if existing else self.ctx.store.agent_node)
        session = self.ctx.store.renew_session(session_id)
        if session is None:
            raise ConsulHTTPError(404, f"Session id '{session_id}' not found")
        return json_response([session_json(session)], request, self.ctx.acl_headers())

    async def destroy(self, request: Request) -> Response:
        session_id = request.path_params["id"]
        existing = self.ctx.store.sessions.get(session_id)
        self._require_write(request, existing.node if existing else self.ctx.store.agent_node)
        self.ctx.store.invalidate_session(session_id)
        return json_response(True, request, self.ctx.acl_headers())

    async def _listing(self, request: Request, pick: Any) -> Response:
        self.ctx.caller(request)  # an unknown token is still "ACL not found"
        store = self.ctx.store

        def query() -> tuple[list[dict[str, Any]], int]:
            with store.lock:
                return [session_json(s) for s in pick()], max(store.session_table_index, 1)

        sessions, index = await blocking_query(
            store, self.ctx.blocking(request), query, lambda r: r[1]
        )
        return json_response(sessions, request, {**read_meta(index), **self.ctx.acl_headers()})

    async def info(self, request: Request) -> Response:
        session_id = request.path_params["id"]
        store = self.ctx.store
        return await self._listing(
            request, lambda: [s for s in store.sessions_sorted() if s.id == session_id]
        )

    async def list_all(self, request: Request) -> Response:
        return await self._listing(request, self.ctx.store.sessions_sorted)

    async def list_node(self, request: Request) -> Response:
        node = request.path_params["node"]
        return await self._listing(request, lambda: self.ctx.store.sessions_sorted(node))
