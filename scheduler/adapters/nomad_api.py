"""A small Nomad HTTP client on httpx: blocking reads keep X-Nomad-Index, which python-nomad drops.

Every failure becomes NomadError so callers can tell "Nomad could not be read" from bad data.
"""

from __future__ import annotations

from typing import Any

import httpx


class NomadError(Exception):
    """Nomad could not be reached or answered with an error (`status`: its HTTP status)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NomadAPI:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        namespace: str | None = None,
        region: str | None = None,
        timeout_s: float = 10.0,
        keepalive: bool = False,
    ) -> None:
        headers = {"X-Nomad-Token": token} if token else {}
        # Keep-alive off by default: a reused connection to a uvicorn-served stand-in stalls
        # ~40 ms per request (delayed ACK); a fresh loopback/LAN connection costs ~1 ms.
        limits = httpx.Limits(max_keepalive_connections=None if keepalive else 0)
        self._client = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout_s, limits=limits
        )
        self.namespace = namespace
        self.region = region
        self.timeout_s = timeout_s

    def close(self) -> None:
        self._client.close()

    def _params(self, extra: dict[str, Any] | None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.namespace:
            params["namespace"] = self.namespace
        if self.region:
            params["region"] = self.region
        params.update(extra or {})
        return params

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        try:
            resp = self._client.request(
                method,
                path,
                params=self._params(params),
                json=body,
                timeout=timeout_s or self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise NomadError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise NomadError(
                f"{method} {path}: {resp.status_code} {resp.text.strip()[:300]}",
                status=resp.status_code,
            )
        return resp

    def read(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        index: int = 0,
        wait_s: float | None = None,
        margin_s: float = 5.0,
    ) -> tuple[Any, int]:
        """GET `path`, blocking when index > 0 and wait_s is set: (body, X-Nomad-Index)."""
        query = dict(params or {})
        timeout = None
        if index > 0 and wait_s:
            query.update(index=index, wait=f"{int(wait_s * 1000)}ms")
            timeout = wait_s + wait_s / 16 + margin_s
        resp = self._call("GET", path, params=query, timeout_s=timeout)
        try:
            new_index = int(resp.headers.get("X-Nomad-Index", "0"))
        except ValueError:
            new_index = 0
        try:
            return resp.json(), new_index
        except ValueError as exc:
            raise NomadError(f"GET {path}: response is not JSON") from exc

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.read(path, params)[0]

    def job_or_none(self, job_id: str) -> dict[str, Any] | None:
        try:
            resp = self._client.get(f"/v1/job/{job_id}", params=self._params(None))
        except httpx.HTTPError as exc:
            raise NomadError(f"GET /v1/job/{job_id}: {exc}") from exc
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise NomadError(f"GET /v1/job/{job_id}: {resp.status_code} {resp.text.strip()[:300]}")
        body: dict[str, Any] = resp.json()
        return body

    def parse(self, hcl: str, variables: str) -> dict[str, Any]:
        body = {"JobHCL": hcl, "Canonicalize": True, "Variables": variables}
        job: dict[str, Any] = self._call("POST", "/v1/jobs/parse", body=body).json()
        return job

    def register(self, job: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._call("POST", "/v1/jobs", body={"Job": job}).json()
        return out

    def deregister(self, job_id: str, *, purge: bool = False) -> dict[str, Any]:
        params = {"purge": "true"} if purge else {}
        out: dict[str, Any] = self._call("DELETE", f"/v1/job/{job_id}", params=params).json()
        return out
