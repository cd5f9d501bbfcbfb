"""Small pieces of the Nomad stand-in's HTTP answers: errors, JSON with Nomad's headers, the
caller's token and namespace, a request's JSON body."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

Handler = Callable[[Request], Awaitable[Response]]


class HttpError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def text_response(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


def json_response(body: Any, index: int | None = None) -> Response:
    headers = {"X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}
    if index is not None:
        headers["X-Nomad-Index"] = str(max(index, 1))
    return Response(json.dumps(body), media_type="application/json", headers=headers)


def token_of(request: Request) -> str | None:
    token = request.headers.get("x-nomad-token")
    if token:
        return token
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def namespace_of(request: Request) -> str:
    return request.query_params.get("namespace") or "default"


def found(value: Any, not_found: str) -> Any:
    """A blocking read whose object went away while it waited answers 404, not null."""
    if value is None:
        raise HttpError(404, not_found)
    return value


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"Request body is not valid JSON: {exc}") from exc
