"""The request path: read and check the body, find a replica (or hold the request until one
is usable), pass the request on and the answer back, chunk by chunk.

A connection refused before any byte was sent is retried once on another replica; nothing
is retried once bytes have gone out. A client that goes away cancels the upstream request,
and every count it raised comes back down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import structlog
from multidict import CIMultiDict
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from scheduler.gateway.catalog import ModelEntry, cannot_come
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.errors import error_response, sse_error
from scheduler.gateway.metrics import UNKNOWN, GatewayMetrics
from scheduler.gateway.replicas import Replica
from scheduler.gateway.state import GatewayState

log = structlog.get_logger("gateway")
T = TypeVar("T")
# Not added by the upstream client: only what the client sent goes on.
AUTO_HEADERS = ("User-Agent", "Accept-Encoding", "Accept", "Content-Type")
# A non-streamed answer up to this size is read whole and sent in one piece.
WHOLE_BYTES = 1 << 20
# Not passed on: hop-by-hop headers (RFC 9110 section 7.6.1) and what the client sets anew.
HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "host", "content-length"}
)  # fmt: skip


class Refused(Exception):
    """An answer other than a replica's: an OpenAI-shaped error response."""

    def __init__(self, response: Response, reason: str) -> None:
        super().__init__(reason)
        self.response = response
        self.reason = reason


@dataclass
class Exchange:
    """One request on its way: what the log line and the metrics report at the end."""

    path: str
    started: float = field(default_factory=time.perf_counter)
    model: str = UNKNOWN
    replica: str | None = None
    status: int = 0
    held_s: float | None = None
    ttfb_s: float | None = None
    outcome: str = "ok"


class Proxy:
    def __init__(
        self, state: GatewayState, upstream: aiohttp.ClientSession, config: GatewayConfig,
        metrics: GatewayMetrics,
    ) -> None:  # fmt: skip
        self.state, self.upstream, self.config, self.metrics = state, upstream, config, metrics

    async def handle(self, request: Request) -> Response:
        ex = Exchange(path=request.url.path)
        try:
            body, doc, entry = await self._read(request, ex)
            replica = await self._acquire(entry, ex, request)
            return await self._forward(request, body, doc, entry, replica, ex)
        except Refused as refused:
            ex.status, ex.outcome = refused.response.status_code, refused.reason
            self._finish(ex)
            return refused.response

    # ------------------------------------------------------------ the body

    async def _read(
        self, request: Request, ex: Exchange
    ) -> tuple[bytes, dict[str, Any], ModelEntry]:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._bad(413, f"Request body is over {limit} bytes", "body_too_large")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise self._bad(413, f"Request body is over {limit} bytes", "body_too_large")
                chunks.append(chunk)
        except ClientDisconnect:
            raise self._bad(
                499, "The client went away before its body ended", "client_closed"
            ) from None
        body = b"".join(chunks)
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._bad(400, f"The body is not valid JSON: {exc}", "invalid_json") from None
        if not isinstance(doc, dict):
            raise self._bad(400, "The body must be a JSON object", "invalid_json")
        model = doc.get("model")
        if not isinstance(model, str) or not model:
            raise self._bad(400, "You must provide a model parameter", "missing_model", "model")
        entry = self.state.models.get(model)
        if entry is None:
            known = ", ".join(sorted(self.state.models)) or "none"
            message = f"The model `{model}` does not exist. Known models: {known}"
            raise self._bad(404, message, "model_not_found", "model")
        ex.model = model
        return body, doc, entry

    def _bad(self, status: int, message: str, code: str, param: str | None = None) -> Refused:
        self.metrics.bad_input.labels(code).inc()
        return Refused(error_response(status, message, code, param), code)

    # ------------------------------------------------------------ a replica

    async def _acquire(self, entry: ModelEntry, ex: Exchange, request: Request) -> Replica:
        reps = self.state.of(entry.name)
        replica = reps.pick()
        if replica is not None:
            return replica
        self._refuse_hopeless(entry.name)
        if self.state.count(entry.name).queued >= entry.max_queued:
            message = f"{entry.max_queued} requests for `{entry.name}` are already waiting"
            raise Refused(
                error_response(429, message, "too_many_queued", None, self.config.retry_after_s),
                "too_many_queued",
            )
        return await self._hold(entry, ex, request)

    def _refuse_hopeless(self, model: str) -> None:
        reason = cannot_come(self.state.statuses.get(model))
        if reason is not None:
            message = f"`{model}` cannot be served now: {reason}"
            response = error_response(
                503, message, "model_unavailable", None, self.config.retry_after_s, retry=False
            )
            raise Refused(response, "model_unavailable")

    async def _hold(self, entry: ModelEntry, ex: Exchange, request: Request) -> Replica:
        """Wait for a usable replica, counted as queued: the scheduler scales on it."""
        reps, model = self.state.of(entry.name), entry.name
        if reps.waking_since is None and not reps.usable():
            reps.waking_since = ex.started
        self.state.change(model, queued=1)
        self.metrics.held.labels(model).inc()
        deadline = ex.started + entry.activation_timeout_s
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while (replica := reps.pick()) is None:
                self._refuse_hopeless(model)
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    message = (
                        f"No replica of `{model}` was ready within {entry.activation_timeout_s:g} s"
                    )
                    response = error_response(
                        503, message, "activation_timeout", None, self.config.retry_after_s
                    )
                    raise Refused(response, "activation_timeout")
                changed = asyncio.ensure_future(reps.changed.wait())
                await asyncio.wait(
                    {changed, gone}, timeout=remaining, return_when="FIRST_COMPLETED"
                )
                changed.cancel()
                if gone.done():
                    raise Refused(
                        error_response(499, "client went away", "client_closed"), "client_closed"
                    )
            if reps.waking_since is not None:
                self.state.woke(model, time.perf_counter() - reps.waking_since)
                reps.waking_since = None
                self.metrics.activations.labels(model).inc()
            return replica
        finally:
            gone.cancel()
            ex.held_s = time.perf_counter() - ex.started
            self.metrics.activation_wait.labels(model).observe(ex.held_s)
            self.metrics.held.labels(model).dec()
            self.state.change(model, queued=-1)

    # ------------------------------------------------------------ upstream

    async def _send(
        self, request: Request, body: bytes, entry: ModelEntry, replica: Replica, ex: Exchange
    ) -> tuple[aiohttp.ClientResponse, Replica]:
        headers = CIMultiDict(
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in HOP
        )
        tried: set[str] = set()
        while True:
            self._open(entry.name, replica, +1)
            sent = self.upstream.post(
                replica.url + ex.path, data=body, headers=headers, skip_auto_headers=AUTO_HEADERS
            )
            try:
                return await _unless_gone(request, sent), replica
            except ClientGone:
                self._open(entry.name, replica, -1)
                raise Refused(
                    error_response(499, "client went away", "client_closed"), "client_closed"
                ) from None
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                self._open(entry.name, replica, -1)
                self.metrics.upstream_errors.labels(entry.name, "refused").inc()
                tried.add(replica.id)
                again = self.state.of(entry.name).pick(exclude=tried) if len(tried) == 1 else None
                if again is None:
                    raise self._upstream_failed(entry.name, replica.url, exc) from None
                replica = again
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._open(entry.name, replica, -1)
                self.metrics.upstream_errors.labels(entry.name, "failed").inc()
                raise self._upstream_failed(entry.name, replica.url, exc) from None

    def _upstream_failed(self, model: str, where: str, exc: Exception) -> Refused:
        message = f"The replica of `{model}` at {where} failed: {type(exc).__name__}"
        return Refused(error_response(502, message, "upstream_error"), "upstream_error")

    def _open(self, model: str, replica: Replica, delta: int) -> None:
        replica.outstanding += delta
        self.state.change(model, inflight=delta)
        self.metrics.inflight.labels(model).inc(delta)

    async def _forward(
        self, request: Request, body: bytes, doc: dict[str, Any], entry: ModelEntry,
        replica: Replica, ex: Exchange,
    ) -> Response:  # fmt: skip
        upstream, replica = await self._send(request, body, entry, replica, ex)
        ex.replica, ex.status = replica.id, upstream.status
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open(entry.name, replica, -1)
                self._finish(ex)

        sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        headers = {
            k: v for k, v in upstream.headers.items() if k.lower() not in HOP - {"content-length"}
        }
        length = upstream.headers.get("content-length", "")
        if not sse and length.isdigit() and int(length) <= WHOLE_BYTES:
            return await self._whole(upstream, ex, headers, entry.name, release)
        relay = self._relay(upstream, ex, sse, release)
        return Relayed(relay, status_code=upstream.status, headers=headers, on_end=release)

    async def _whole(
        self, upstream: aiohttp.ClientResponse, ex: Exchange, headers: dict[str, str],
        model: str, release: Callable[[], None],
    ) -> Response:  # fmt: skip
        """A small answer that is not a stream (it comes whole at the end of the generation
        anyway), read and sent in one piece: a replica failing before its end is still a 502."""
        try:
            content = await upstream.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.upstream_errors.labels(model, "mid_stream").inc()
            ex.status, ex.outcome = 502, "upstream_dropped"
            return self._upstream_failed(model, str(upstream.url.origin()), exc).response
        finally:
            upstream.release()
            ex.ttfb_s = time.perf_counter() - ex.started
            release()
        return Response(content, upstream.status, headers=headers)

    async def _relay(
        self, upstream: aiohttp.ClientResponse, ex: Exchange, sse: bool,
        release: Callable[[], None],
    ) -> AsyncIterator[bytes]:  # fmt: skip
        finished = False
        try:
            async for chunk in upstream.content.iter_any():
                if ex.ttfb_s is None:
                    ex.ttfb_s = time.perf_counter() - ex.started
                yield chunk
            finished = True
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.upstream_errors.labels(ex.model, "mid_stream").inc()
            ex.outcome = "upstream_dropped"
            if not sse:
                raise  # the length was promised: the connection is cut, not a short body
            yield sse_error(
                f"The replica stopped mid-answer: {type(exc).__name__}", "upstream_dropped"
            )
        except asyncio.CancelledError:
            ex.outcome = "client_closed"
            raise
        finally:
            if finished:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # cut: the replica sees its client gone and stops
            release()

    # ------------------------------------------------------------ the end

    def _finish(self, ex: Exchange) -> None:
        duration = time.perf_counter() - ex.started
        self.metrics.requests.labels(ex.model, str(ex.status)).inc()
        self.metrics.duration.labels(ex.model).observe(duration)
        if ex.ttfb_s is not None:
            self.metrics.ttfb.labels(ex.model).observe(ex.ttfb_s)
        if self.config.log_requests:
            log.info(
                "request", path=ex.path, model=ex.model, replica=ex.replica, status=ex.status,
                outcome=ex.outcome, duration_s=round(duration, 6),
                ttfb_s=None if ex.ttfb_s is None else round(ex.ttfb_s, 6),
                held_s=None if ex.held_s is None else round(ex.held_s, 6),
            )  # fmt: skip


class ClientGone(Exception):
    """The client went away before the answer began."""


async def _unless_gone(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, or ClientGone (and `work` cancelled) if the client leaves first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await task
        raise ClientGone
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (the body was read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Relayed(StreamingResponse):
    """A streamed answer whose counts come down however it ends: finished, failed, or the
    client gone (the relay is then closed here, where the cancelled send left it open)."""

    def __init__(
        self, content: AsyncIterator[bytes], on_end: Callable[[], None], **kw: Any
    ) -> None:
        super().__init__(content, **kw)
        self.on_end = on_end
        self.relay = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.relay, "aclose", None)
            if aclose is not None:
                await aclose()
            self.on_end()
