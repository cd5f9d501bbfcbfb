"""PUT /v1/txn: request limits and decoding (agent/txn_endpoint.go), then txn.run_kv_txn.

Node, Service and Check operations are decoded and echoed with the documented result shape,
but the stand-in keeps no catalog state for them (its catalog is fed by ServiceRegistry).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.context import DATACENTER, KV_MAX_VALUE_SIZE, RouteContext
from llm_scheduler_standins.consul.httpkit import ConsulHTTPError, json_response
from llm_scheduler_standins.consul.txn import KVOp, run_kv_txn

MAX_TXN_OPS = 64
MAX_TXN_BODY = 512 * 1024


def _lower_keys(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _parse_failed(f"{where}: expected a JSON object")
    # Go's encoding/json matches field names case-insensitively.
    return {str(k).lower(): v for k, v in value.items()}


def _parse_failed(reason: str) -> ConsulHTTPError:
    return ConsulHTTPError(400, f"Failed to parse body: {reason}")


def _uint(raw: Any, where: str) -> int:
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise _parse_failed(f"{where}: expected an unsigned integer, got {raw!r}")
    return raw


def decode_kv_op(raw: Any, position: int) -> KVOp:
    fields = _lower_keys(raw, f"op {position} KV")
    verb, key, session = fields.get("verb"), fields.get("key", ""), fields.get("session") or ""
    if not isinstance(verb, str) or not isinstance(key, str) or not isinstance(session, str):
        raise _parse_failed(f"op {position} KV: Verb, Key and Session must be strings")
    encoded = fields.get("value")
    value = b""
    if encoded is not None:
        if not isinstance(encoded, str):
            raise _parse_failed(f"op {position} KV.Value: expected a base64 string")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as error:
            raise _parse_failed(f"op {position} KV.Value: illegal base64 data ({error})") from None
    if len(value) > KV_MAX_VALUE_SIZE:
        raise ConsulHTTPError(
            413,
            f"Value for key {json.dumps(key)} is too large "
            f"({len(value)} > {KV_MAX_VALUE_SIZE} bytes)",
        )
    return KVOp(
        verb=verb,
        key=key,
        value=value,
        flags=_uint(fields.get("flags"), f"op {position} KV.Flags"),
        index=_uint(fields.get("index"), f"op {position} KV.Index"),
        session=session,
    )


def echo_catalog_op(kind: str, raw: Any, index: int, position: int) -> dict[str, Any] | None:
    """The result a Node/Service/Check op produces; deletes produce none."""
    fields = _lower_keys(raw, f"op {position} {kind}")
    verb = str(fields.get("verb", ""))
    if verb.startswith("delete"):
        return None
    if kind == "Node":
        node = dict(fields.get("node") or {})
        node.setdefault("Datacenter", DATACENTER)
        node.setdefault("TaggedAddresses", None)
        node.setdefault("Meta", {})
        return {"Node": {**node, "CreateIndex": index, "ModifyIndex": index}}
    if kind == "Service":
        service = dict(fields.get("service") or {})
        return {"Service": {**service, "CreateIndex": index, "ModifyIndex": index}}
    check = dict(fields.get("check") or {})
    check.pop("ModifyIndex", None)
    for name in ("Notes", "Output"):
        check.setdefault(name, "")
    check.setdefault("ServiceTags", None)
    return {"Check": {**check, "CreateIndex": index, "ModifyIndex": index}}


class TxnRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [Route("/v1/txn", self.txn, methods=["PUT"])]

    async def txn(self, request: Request) -> Response:
        caller = self.ctx.caller(request)
        raw = await request.body()
        if len(raw) > MAX_TXN_BODY:
            raise ConsulHTTPError(413, f"Request body too large, max size: {MAX_TXN_BODY} bytes")
        try:
            body = json.loads(raw) if raw.strip() else []
        except ValueError as error:
            raise _parse_failed(str(error)) from None
        if not isinstance(body, list):
            raise _parse_failed("expected a JSON array of operations")
        if len(body) > MAX_TXN_OPS:
            raise ConsulHTTPError(
                413, f"Transaction contains too many operations ({len(body)} > {MAX_TXN_OPS})"
            )
        kv_ops: list[tuple[int, KVOp]] = []
        catalog_ops: list[tuple[int, str, Any]] = []
        for position, op in enumerate(body):
            fields = {k.lower(): v for k, v in _lower_keys(op, f"op {position}").items()}
            if "kv" in fields:
                kv_ops.append((position, decode_kv_op(fields["kv"], position)))
                continue
            kinds = [k for k in ("node", "service", "check") if k in fields]
            if not kinds:
                raise _parse_failed(f"op {position}: expected one of KV, Node, Service, Check")
            catalog_ops.append((position, kinds[0].capitalize(), fields[kinds[0]]))
        outcome = run_kv_txn(self.ctx.store, caller, kv_ops)
        headers = {
            "X-Consul-KnownLeader": "true",
            "X-Consul-LastContact": "0",
            **self.ctx.acl_headers(),
        }
        if outcome.errors:
            return json_response(
                {"Results": None, "Errors": outcome.errors}, request, headers, status=409
            )
        index = self.ctx.store.index
        results = list(outcome.results)
        for position, kind, raw_op in catalog_ops:
            echoed = echo_catalog_op(kind, raw_op, index, position)
            if echoed is not None:
                results.append((position, echoed))
        results.sort(key=lambda item: item[0])
        return json_response({"Results": [r for _, r in results], "Errors": None}, request, headers)
