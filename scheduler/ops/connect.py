"""Reach Consul and Nomad the way their own CLIs do (CONSUL_HTTP_ADDR, NOMAD_ADDR, tokens), and
turn an unreachable server into one sentence that says how to fix it."""

from __future__ import annotations

import os
from typing import Any

from scheduler.adapters.kv_layout import DEFAULT_PREFIX, KVLayout

DEFAULT_CONSUL = "http://127.0.0.1:8500"
DEFAULT_NOMAD = "http://127.0.0.1:4646"
PREFIX_ENV = "LLM_SCHEDULER_KV_PREFIX"


class OperatorError(Exception):
    """An error meant for an operator: one sentence, with the fix."""


def consul_addr() -> str:
    addr = os.environ.get("CONSUL_HTTP_ADDR") or DEFAULT_CONSUL
    return addr if "://" in addr else f"http://{addr}"


def nomad_addr() -> str:
    addr = os.environ.get("NOMAD_ADDR") or DEFAULT_NOMAD
    return addr if "://" in addr else f"http://{addr}"


def layout(prefix: str | None = None) -> KVLayout:
    return KVLayout(prefix or os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX)


def consul_client(url: str | None = None) -> Any:
    import urllib.parse

    import consul as consul_lib

    parsed = urllib.parse.urlparse(url or consul_addr())
    return consul_lib.Consul(  # type: ignore[attr-defined]
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or (443 if parsed.scheme == "https" else 8500),
        scheme=parsed.scheme or "http",
        token=os.environ.get("CONSUL_HTTP_TOKEN"),
        connections_timeout=10,
    )


def nomad_client(url: str | None = None) -> Any:
    import nomad as nomad_lib

    return nomad_lib.Nomad(  # type: ignore[attr-defined]
        address=url or nomad_addr(),
        token=os.environ.get("NOMAD_TOKEN"),
        namespace=os.environ.get("NOMAD_NAMESPACE"),
        timeout=10,
    )


def unreachable(service: str, url: str, exc: BaseException) -> OperatorError:
    env = "CONSUL_HTTP_ADDR" if service == "Consul" else "NOMAD_ADDR"
    text = str(exc)
    if "403" in text or "Permission denied" in text or "ACL" in text:
        token = "CONSUL_HTTP_TOKEN" if service == "Consul" else "NOMAD_TOKEN"
        return OperatorError(
            f"{service} at {url} refused the request (permission denied): set {token} to a "
            "token with the scheduler's policy"
        )
    return OperatorError(f"cannot reach {service} at {url}: start it or set {env}")


def is_connection_error(exc: BaseException) -> bool:
    import requests

    kinds = (requests.exceptions.RequestException, ConnectionError, OSError)
    # python-nomad wraps transport errors in BaseNomadException(nomad_resp=<the requests error>).
    return isinstance(exc, kinds) or isinstance(getattr(exc, "nomad_resp", None), kinds)
