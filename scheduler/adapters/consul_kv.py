"""py-consul in one place: the client, KV reads, CAS writes. Failures become ConsulError."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, TypeAlias

import requests

import consul

# py-consul ships no usable type information for mypy.
ConsulClient: TypeAlias = Any
_consul: Any = consul


class ConsulError(Exception):
    """Consul could not be reached or refused the request."""


def make_consul(
    host: str, port: int, scheme: str, token: str | None, keepalive: bool = False
) -> ConsulClient:
    # py-consul reads CONSUL_HTTP_TOKEN itself and lets it win over `token`.
    client = _consul.Consul(host=host, port=port, token=token, scheme=scheme)
    if not keepalive:
        # See NomadAPI: reused connections stall ~40 ms on delayed ACKs.
        client.http.session.headers["Connection"] = "close"
    return client


CONSUL_ERRORS: tuple[type[BaseException], ...] = (
    _consul.ConsulException,
    requests.RequestException,
    OSError,
)


FILTERED_HEADER = "X-Consul-Results-Filtered-By-ACLs"


@dataclass(frozen=True)
class KVListing:
    index: int  # X-Consul-Index
    entries: list[dict[str, Any]]
    # Consul left out keys the token may not read (agent/http.go sets the header; the
    # listing is otherwise an ordinary 200). What is missing is unknown, not deleted.
    filtered: bool = False


def kv_read(
    client: ConsulClient,
    prefix: str,
    *,
    index: int = 0,
    wait_s: float | None = None,
) -> KVListing:
    """A recursive read of `prefix` through py-consul's HTTP client, keeping the headers its
    kv.get() drops; blocking when index > 0."""
    params: list[tuple[str, Any]] = [("recurse", "1")]
    if index > 0 and wait_s:
        # py-consul's sync client derives its read timeout from `wait` itself (wait + wait/16
        # + connections_timeout).
        params += [("index", index), ("wait", f"{max(1, int(wait_s))}s")]
    if getattr(client, "dc", None):
        params.append(("dc", client.dc))
    if getattr(client, "consistency", None) in ("consistent", "stale"):
        params.append((client.consistency, "1"))

    def parse(response: Any) -> KVListing:
        _consul.callback.CB._status(response, allow_404=True)
        headers = response.headers
        entries: list[dict[str, Any]] = []
        if response.code != 404:
            try:
                entries = list(json.loads(response.body) or [])
            except (ValueError, TypeError) as exc:
                raise _consul.ConsulException(f"Failed to decode JSON: {exc}") from exc
            for entry in entries:
                if entry.get("Value") is not None:
                    entry["Value"] = base64.b64decode(entry["Value"])
        try:
            new_index = int(headers.get("X-Consul-Index") or 0)
        except (TypeError, ValueError):
            new_index = 0
        filtered = str(headers.get(FILTERED_HEADER, "")).lower() == "true"
        return KVListing(new_index, entries, filtered)

    try:
        listing: KVListing = client.http.get(
            parse, f"/v1/kv/{prefix}", params=params, headers=client.prepare_headers()
        )
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"read {prefix}: {type(exc).__name__}: {exc}") from exc
    return listing


def kv_list(
    client: ConsulClient,
    prefix: str,
    *,
    index: int = 0,
    wait_s: float | None = None,
    margin_s: float = 5.0,
) -> tuple[int, list[dict[str, Any]]]:
    """A recursive read of `prefix`: (X-Consul-Index, entries); blocking when index > 0."""
    listing = kv_read(client, prefix, index=index, wait_s=wait_s)
    return listing.index, listing.entries


def kv_get(client: ConsulClient, key: str) -> dict[str, Any] | None:
    try:
        _, entry = client.kv.get(key)
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"read {key}: {type(exc).__name__}: {exc}") from exc
    return dict(entry) if entry else None


def kv_cas(client: ConsulClient, key: str, value: str, cas: int) -> bool:
    """Write `value` only if the key's ModifyIndex is still `cas` (0: only if absent)."""
    try:
        return bool(client.kv.put(key, value, cas=cas))
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"write {key}: {type(exc).__name__}: {exc}") from exc


MAX_TXN_OPS = 64  # agent/txn_endpoint.go maxTxnOps


def kv_txn_cas(client: ConsulClient, writes: list[tuple[str, str, int]]) -> bool:
    """Several CAS writes `(key, value, index)` in one transaction (all or none); False when
    one index was stale. Sent through py-consul's HTTP client with the token header, which
    its txn.put() leaves out."""
    ops = [
        {"KV": {"Verb": "cas", "Key": key, "Value": base64.b64encode(value.encode()).decode(),
                "Index": index}}
        for key, value, index in writes
    ]  # fmt: skip

    def done(response: Any) -> bool:
        if response.code == 409:
            return False  # a stale index: Consul lists it in Errors and applies nothing
        _consul.callback.CB._status(response)
        return bool(response.code == 200)

    try:
        result: bool = client.http.put(
            done, "/v1/txn", data=json.dumps(ops), headers=client.prepare_headers()
        )
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"txn of {len(ops)} writes: {type(exc).__name__}: {exc}") from exc
    return result


def kv_delete_cas(client: ConsulClient, key: str, cas: int) -> bool:
    """Delete `key` only if its ModifyIndex is still `cas` (Consul: true when already gone)."""
    try:
        return bool(client.kv.delete(key, cas=cas))
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"delete {key}: {type(exc).__name__}: {exc}") from exc


def passing_allocs(client: ConsulClient, service: str) -> set[str]:
    """Nomad allocation ids whose instance of `service` passes all its Consul checks.

    Nomad names a service registration `_nomad-task-<alloc id>-<task>-<service>-<port>`.
    """
    try:
        _, entries = client.health.service(service)
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"health {service}: {type(exc).__name__}: {exc}") from exc
    out: set[str] = set()
    for entry in entries or []:
        checks = entry.get("Checks") or []
        if not all(c.get("Status") == "passing" for c in checks):
            continue
        sid = str((entry.get("Service") or {}).get("ID") or "")
        if sid.startswith("_nomad-task-") and len(sid) >= len("_nomad-task-") + 36:
            out.add(sid[len("_nomad-task-") : len("_nomad-task-") + 36])
    return out


def passing_allocs_of(client: ConsulClient, services: set[str]) -> dict[str, set[str]]:
    """`passing_allocs` for many services in one read of every check (/v1/health/state/any),
    instead of one /v1/health/service call per service (500 models: 1.5 s a pass). An instance
    passes when its own checks and its node's checks all pass, as in /v1/health/service."""
    try:
        _, checks = client.health.state("any")
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"health: {type(exc).__name__}: {exc}") from exc
    node_ok: dict[str, bool] = {}
    instances: dict[str, tuple[str, str, bool]] = {}  # service id -> (name, node, passing)
    for check in checks or []:
        sid = str(check.get("ServiceID") or "")
        node = str(check.get("Node") or "")
        passing = check.get("Status") == "passing"
        if not sid:
            node_ok[node] = node_ok.get(node, True) and passing
            continue
        name = str(check.get("ServiceName") or "")
        if name not in services:
            continue
        before = instances.get(sid)
        instances[sid] = (name, node, passing and (before[2] if before else True))
    out: dict[str, set[str]] = {name: set() for name in services}
    for sid, (name, node, passing) in instances.items():
        if not passing or not node_ok.get(node, True):
            continue
        if sid.startswith("_nomad-task-") and len(sid) >= len("_nomad-task-") + 36:
            out[name].add(sid[len("_nomad-task-") : len("_nomad-task-") + 36])
    return out
