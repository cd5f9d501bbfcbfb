"""py-consul in one place: the client, KV reads, CAS writes. Failures become ConsulError."""

from __future__ import annotations

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


def kv_list(
    client: ConsulClient,
    prefix: str,
    *,
    index: int = 0,
    wait_s: float | None = None,
    margin_s: float = 5.0,
) -> tuple[int, list[dict[str, Any]]]:
    """A recursive read of `prefix`: (X-Consul-Index, entries); blocking when index > 0."""
    kwargs: dict[str, Any] = {"recurse": True}
    if index > 0 and wait_s:
        # py-consul's sync client derives its read timeout from `wait` itself (wait + wait/16
        # + connections_timeout); its `connections_timeout` argument on get() raises TypeError.
        kwargs.update(index=index, wait=f"{max(1, int(wait_s))}s")
    try:
        idx, entries = client.kv.get(prefix, **kwargs)
    except CONSUL_ERRORS as exc:
        raise ConsulError(f"read {prefix}: {type(exc).__name__}: {exc}") from exc
    try:
        new_index = int(idx or 0)
    except (TypeError, ValueError):
        new_index = 0
    return new_index, list(entries or [])


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
