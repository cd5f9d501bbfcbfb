"""The few Consul HTTP calls the gateway makes, async, over one pooled client.

Blocking queries follow Consul's rules: echo `X-Consul-Index` back as `?index=`, keep it at
least 1, reset it to 0 when it goes backwards, and expect returns without change.
"""

from __future__ import annotations

from typing import Any

import httpx


class ConsulUnavailable(Exception):
    """Consul did not answer, or answered with an error."""


def next_index(old: int, header: str | None) -> int:
    try:
        new = int(header or 0)
    except ValueError:
        return 0
    if new < old:
        return 0  # went backwards (a restored server): start over
    return max(new, 1)


class AsyncConsul:
    def __init__(self, addr: str, token: str | None, wait_s: float) -> None:
        headers = {"X-Consul-Token": token} if token else {}
        self.wait_s = wait_s
        # Consul adds up to wait/16 of jitter to a blocking query.
        timeout = httpx.Timeout(wait_s + wait_s / 16 + 5.0, connect=2.0)
        self.http = httpx.AsyncClient(base_url=addr.rstrip("/"), headers=headers, timeout=timeout)

    async def close(self) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            reply = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ConsulUnavailable(f"{method} {path}: {exc!r}") from exc
        if reply.status_code >= 400 and reply.status_code != 404:
            raise ConsulUnavailable(f"{method} {path}: {reply.status_code} {reply.text[:200]}")
        return reply

    async def health(self, service: str, index: int) -> tuple[list[dict[str, Any]], int]:
        """Every registered instance of `service` with its checks (passing or not)."""
        params = {"index": str(index), "wait": f"{int(self.wait_s)}s"} if index else {}
        reply = await self._call("GET", f"/v1/health/service/{service}", params=params)
        body = reply.json() if reply.status_code == 200 else []
        return (body if isinstance(body, list) else []), next_index(
            index, reply.headers.get("X-Consul-Index")
        )

    async def kv_list(self, prefix: str, index: int) -> tuple[list[dict[str, Any]], int]:
        params = {"recurse": "true"}
        if index:
            params.update(index=str(index), wait=f"{int(self.wait_s)}s")
        reply = await self._call("GET", f"/v1/kv/{prefix}", params=params)
        body = reply.json() if reply.status_code == 200 else []
        return (body if isinstance(body, list) else []), next_index(
            index, reply.headers.get("X-Consul-Index")
        )

    async def session_create(self, name: str, ttl_s: int) -> str:
        # TTL only (no node checks), keys deleted with the session, no lock-delay: each
        # instance has its own key, so there is no lock to protect.
        body = {"Name": name, "TTL": f"{ttl_s}s", "Behavior": "delete", "LockDelay": "0s",
                "NodeChecks": []}  # fmt: skip
        reply = await self._call("PUT", "/v1/session/create", json=body)
        return str(reply.json()["ID"])

    async def session_renew(self, session: str) -> bool:
        """False when the session is gone (expired or destroyed): make a new one."""
        reply = await self._call("PUT", f"/v1/session/renew/{session}")
        return reply.status_code == 200

    async def session_destroy(self, session: str) -> None:
        await self._call("PUT", f"/v1/session/destroy/{session}")

    async def put_acquired(self, key: str, value: bytes, session: str) -> bool:
        reply = await self._call("PUT", f"/v1/kv/{key}", params={"acquire": session}, content=value)
        return reply.status_code == 200 and reply.json() is True
