"""/v1/kv/<key>: GET (single, recurse, keys, raw, blocking), PUT (cas, flags, locks), DELETE.

Semantics follow hashicorp/consul's agent/kvs_endpoint.go and agent/consul/state/kvs.go.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.acl import Caller
from llm_scheduler_standins.consul.context import KV_MAX_VALUE_SIZE, RouteContext
from llm_scheduler_standins.consul.httpkit import (
    ConsulHTTPError,
    blocking_query,
    has_flag,
    json_response,
    read_meta,
)
from llm_scheduler_standins.consul.tables import KVEntry, StoreError


def dir_entry_json(entry: KVEntry, *, with_value: bool = True) -> dict[str, Any]:
    """structs.DirEntry as Go emits it: Value null when empty, Session omitted when unlocked."""
    body: dict[str, Any] = {
        "LockIndex": entry.lock_index,
        "Key": entry.key,
        "Flags": entry.flags,
        "Value": base64.b64encode(entry.value).decode() if with_value and entry.value else None,
    }
    if entry.session:
        body["Session"] = entry.session
    body["CreateIndex"] = entry.create_index
    body["ModifyIndex"] = entry.modify_index
    return body


def parse_uint(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
        if value < 0 or value >= 1 << 64 or not raw.isdigit():
            raise ValueError(raw)
    except ValueError:
        # Consul returns the strconv error as a 500.
        raise ConsulHTTPError(500, f'strconv.ParseUint: parsing "{raw}": invalid syntax') from None
    return value


def conflicting_flags(request: Request) -> ConsulHTTPError:
    encoded = urlencode(sorted(request.query_params.multi_items()))
    return ConsulHTTPError(400, f"Conflicting flags: {encoded}")


@dataclass(frozen=True)
class _Single:
    entry: KVEntry | None
    index: int
    tombstone: int


class KVRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/v1/kv/{key:path}", self.dispatch, methods=["GET", "PUT", "DELETE"]),
            Route("/v1/kv", self.dispatch, methods=["GET", "PUT", "DELETE"]),
        ]

    async def dispatch(self, request: Request) -> Response:
        key = request.path_params.get("key", "")
        caller = self.ctx.caller(request)
        if request.method == "GET":
            return await self.get(request, key, caller)
        if request.method == "PUT":
            return await self.put(request, key, caller)
        return self.delete(request, key, caller)

    # -- reads ---------------------------------------------------------------------------

    async def get(self, request: Request, key: str, caller: Caller) -> Response:
        params = self.ctx.blocking(request)
        if has_flag(request, "keys"):
            return await self.list_keys(request, key, caller)
        if has_flag(request, "recurse"):
            return await self.list_entries(request, key, caller)
        if not key:
            raise ConsulHTTPError(400, "Missing key name")
        if not caller.can_read_key(key):
            raise caller.denied("key:read", key)
        store = self.ctx.store

        def query() -> _Single:
            with store.lock:
                entry = store.kv.entries.get(key)
                index = entry.modify_index if entry else store.kv.table_index
                return _Single(entry, max(index, 1), store.kv.tombstones.get(key, 0))

        # A missing key stays blocked until it appears, unless it was deleted since `index`.
        result = await blocking_query(
            store,
            params,
            query,
            lambda r: r.index,
            lambda r: r.entry is None and r.tombstone <= params.min_index,
        )
        headers = {**read_meta(result.index), **self.ctx.acl_headers()}
        if result.entry is None:
            return Response(b"", status_code=404, headers=headers)
        if has_flag(request, "raw"):
            headers["X-Content-Type-Options"] = "nosniff"
            headers["Content-Security-Policy"] = "sandbox"
            return Response(result.entry.value, media_type="text/plain", headers=headers)
        return json_response([dir_entry_json(result.entry)], request, headers)

    async def _list(
        self, request: Request, prefix: str, caller: Caller
    ) -> tuple[list[KVEntry], int, bool]:
        store = self.ctx.store

        def query() -> tuple[list[KVEntry], int]:
            with store.lock:
                return store.kv.under(prefix), store.kv.prefix_index(prefix)

        entries, index = await blocking_query(
            store, self.ctx.blocking(request), query, lambda r: r[1]
        )
        visible = [e for e in entries if caller.can_read_key(e.key)]
        return visible, index, len(visible) != len(entries)

    def _list_headers(self, index: int, filtered: bool, caller: Caller) -> dict[str, str]:
        headers = {**read_meta(index), **self.ctx.acl_headers()}
        if filtered and caller.filters_results:
            headers["X-Consul-Results-Filtered-By-ACLs"] = "true"
        return headers

    async def list_entries(self, request: Request, prefix: str, caller: Caller) -> Response:
        entries, index, filtered = await self._list(request, prefix, caller)
        headers = self._list_headers(index, filtered, caller)
        if not entries:
            return Response(b"", status_code=404, headers=headers)
        return json_response([dir_entry_json(e) for e in entries], request, headers)

    async def list_keys(self, request: Request, prefix: str, caller: Caller) -> Response:
        entries, index, filtered = await self._list(request, prefix, caller)
        separator = request.query_params.get("separator") or request.query_params.get("seperator")
        keys: list[str] = []
        for entry in entries:
            name = entry.key
            if separator:
                cut = name.find(separator, len(prefix))
                if cut >= 0:
                    name = name[: cut + len(separator)]
            if not keys or keys[-1] != name:
                keys.append(name)
        headers = self._list_headers(index, filtered, caller)
        if not keys and prefix:
            return Response(b"", status_code=404, headers=headers)
        return json_response(keys, request, headers)

    # -- writes --------------------------------------------------------------------------

    async def put(self, request: Request, key: str, caller: Caller) -> Response:
        if not key:
            raise ConsulHTTPError(400, "Missing key name")
        if sum(has_flag(request, f) for f in ("cas", "acquire", "release")) > 1:
            raise conflicting_flags(request)
        if not caller.can_write_key(key):
            raise caller.denied("key:write", key)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > KV_MAX_VALUE_SIZE:
            raise _too_large(int(declared))
        flags = parse_uint(request, "flags") or 0
        cas = parse_uint(request, "cas")
        value = await request.body()
        if len(value) > KV_MAX_VALUE_SIZE:
            raise _too_large(len(value))
        store = self.ctx.store
        try:
            if has_flag(request, "acquire"):
                done = store.kv_acquire(key, value, flags, request.query_params["acquire"])
            elif has_flag(request, "release"):
                done = store.kv_release(key, value, flags, request.query_params["release"])
            elif cas is not None:
                done = store.kv_cas(key, value, flags, cas)
            else:
                done = store.kv_set(key, value, flags)
        except StoreError as error:
            raise ConsulHTTPError(500, str(error)) from None
        return json_response(done, request, self.ctx.acl_headers())

    def delete(self, request: Request, key: str, caller: Caller) -> Response:
        recurse = has_flag(request, "recurse")
        if recurse and has_flag(request, "cas"):
            raise conflicting_flags(request)
        if not key and not recurse:
            raise ConsulHTTPError(400, "Missing key name")
        store = self.ctx.store
        if recurse:
            with store.lock:
                existing = [e.key for e in store.kv.under(key)]
            if not caller.can_write_prefix(key, existing):
                raise caller.denied("key:write", key)
        elif not caller.can_write_key(key):
            raise caller.denied("key:write", key)
        cas = parse_uint(request, "cas")
        done = store.kv_delete(key, recurse=recurse, cas=cas)
        return json_response(done, request, self.ctx.acl_headers())


def _too_large(size: int) -> ConsulHTTPError:
    return ConsulHTTPError(
        413,
        f"Request body({size} bytes) too large, max size: {KV_MAX_VALUE_SIZE} bytes. See "
        "https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size.",
    )
