"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "client_closed_request",
    502: "upstream_error",
    503: "service_unavailable",
}


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict[str, object]:
    kind = TYPES.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    code: str,
    param: str | None = None,
    retry_after_s: int | None = None,
    retry: bool | None = None,
) -> JSONResponse:
    """`retry_after_s`: when to come back (OpenAI's clients honour it up to 60-120 s);
    `retry`: `x-should-retry`, which overrides the client's own choice by status."""
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    if retry is not None:
        headers["x-should-retry"] = "true" if retry else "false"
    return JSONResponse(error_body(status, message, code, param), status, headers=headers)


def sse_error(message: str, code: str) -> bytes:
    """How a stream that already began says it failed: an error event, then [DONE]."""
    body = json.dumps(error_body(502, message, code))
    return f"data: {body}\n\ndata: [DONE]\n\n".encode()
