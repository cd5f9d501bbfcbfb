"""The OpenAI-compatible bodies a vLLM replica answers, for the stand-in model servers.

Shapes as vLLM writes them: `{"error": {"message", "type", "param", "code": <HTTP status>}}`
for errors; SSE events `data: <json>\\n\\n` with no `event:` line, ending in `data: [DONE]`; a
`choices: []` chunk with `usage` before it when `stream_options.include_usage` is set.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
ENDPOINTS = (CHAT, COMPLETIONS, EMBEDDINGS)
DEFAULT_MAX_TOKENS = 16
MAX_TOKENS_CAP = 4096
EMBEDDING_DIM = 8
WORDS = ("the", "model", "answers", "with", "a", "few", "plain", "words", "and", "then", "stops")


class BadRequest(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    error = {"message": message, "type": kind, "param": param, "code": status}
    return json.dumps({"error": error}).encode()


@dataclass(frozen=True)
class Ask:
    """One parsed request: which endpoint, how many tokens, streamed or not."""

    path: str
    model: str
    max_tokens: int
    stream: bool
    include_usage: bool
    prompt_tokens: int
    inputs: int  # embeddings: how many inputs


def parse(path: str, raw: bytes, served: str) -> Ask:
    try:
        body = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "Input should be a valid dictionary")
    model = body.get("model", served)
    if model != served:
        raise BadRequest(404, f"The model `{model}` does not exist.", "model")
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options is not None and not stream:
        raise BadRequest(400, "Stream options can only be defined when `stream=True`.")
    limit = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= MAX_TOKENS_CAP:
        raise BadRequest(400, "max_tokens must be a positive integer", "max_tokens")
    prompt = body.get("messages") if path == CHAT else body.get("prompt", body.get("input"))
    inputs = len(prompt) if path == EMBEDDINGS and isinstance(prompt, list) else 1
    return Ask(
        path=path,
        model=served,
        max_tokens=limit,
        stream=stream and path != EMBEDDINGS,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        prompt_tokens=max(1, len(json.dumps(prompt)) // 4),
        inputs=max(1, inputs),
    )


def token(i: int) -> str:
    return WORDS[i % len(WORDS)] + " "


def _usage(ask: Ask, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": ask.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": ask.prompt_tokens + completion,
    }


def whole(ask: Ask) -> bytes:
    """The non-streamed answer."""
    created = int(time.time())
    if ask.path == EMBEDDINGS:
        data = [
            {"object": "embedding", "index": i, "embedding": [0.125 * (i + 1)] * EMBEDDING_DIM}
            for i in range(ask.inputs)
        ]
        usage = {"prompt_tokens": ask.prompt_tokens, "total_tokens": ask.prompt_tokens}
        return json.dumps(
            {"object": "list", "data": data, "model": ask.model, "usage": usage}
        ).encode()
    text = "".join(token(i) for i in range(ask.max_tokens))
    body: dict[str, Any]
    if ask.path == CHAT:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "length"}  # fmt: skip
        body = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion"}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        body = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion"}
    body.update(
        created=created, model=ask.model, choices=[choice], usage=_usage(ask, ask.max_tokens)
    )
    return json.dumps(body).encode()


class Stream:
    """The events of one streamed answer, one token at a time."""

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.id = f"chatcmpl-{uuid.uuid4().hex}" if ask.path == CHAT else f"cmpl-{uuid.uuid4().hex}"
        self.object = "chat.completion.chunk" if ask.path == CHAT else "text_completion"
        self.created = int(time.time())

    def _event(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body = {"id": self.id, "object": self.object, "created": self.created,
                "model": self.ask.model, "choices": choices, **extra}  # fmt: skip
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def chunk(self, i: int) -> bytes:
        last = i == self.ask.max_tokens - 1
        finish = "length" if last else None
        if self.ask.path == CHAT:
            delta: dict[str, Any] = {"content": token(i)}
            if i == 0:
                delta["role"] = "assistant"
            return self._event([{"index": 0, "delta": delta, "finish_reason": finish}])
        return self._event([{"index": 0, "text": token(i), "finish_reason": finish}])

    def end(self) -> bytes:
        tail = b""
        if self.ask.include_usage:
            tail = self._event([], usage=_usage(self.ask, self.ask.max_tokens))
        return tail + b"data: [DONE]\n\n"
