"""Stand-in model servers: what a vLLM or SGLang replica answers, for the demo, tests and
devcluster, at a cost of almost nothing per replica.

One asyncio loop in one thread serves every replica, each on its own loopback port, HTTP/1.1
with keep-alive: `/health` (200, empty, as vLLM), `/v1/models`, `/metrics` with the real metric
names of its runtime, and the OpenAI endpoints `/v1/chat/completions`, `/v1/completions` and
`/v1/embeddings`, streamed (SSE, chunked) or not. The load on a replica is what the model's
clients offer (`ModelServers.offer(model, concurrent_requests)`, spread evenly over its
replicas) plus the requests it is answering. A simple queueing model turns it into timing and
metrics: a replica runs up to `capacity` requests at once, the rest wait; TTFT grows with the
queue (each queued request waits its turn, about `request_s` per capacity's worth), the
inter-token latency and KV-cache usage with the running requests. Histograms and counters
advance lazily, when a page is read, by what the elapsed time would have observed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from llm_scheduler_standins import openai_bodies as bodies

# vLLM's bucket bounds (vllm/v1/metrics/loggers.py); SGLang's are close enough for a stand-in.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
JSON = "application/json"
KEEP_ALIVE_S = 30.0  # an idle keep-alive connection is closed after this
_REASONS = {400: "Bad Request", 404: "Not Found"}
# Spread of one reading around its mean (value factor, share of requests): a p90 lands in it.
SPREAD = ((0.6, 0.3), (1.0, 0.5), (1.4, 0.2))

NAMES = {
    "vllm": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv": "vllm:kv_cache_usage_perc",
        "ttft": "vllm:time_to_first_token_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "tokens": "vllm:generation_tokens",
    },
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "kv": "sglang:token_usage",
        "ttft": "sglang:time_to_first_token_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "tokens": "sglang:generation_tokens",
    },
}


@dataclass
class QueueModel:
    capacity: float = 8.0  # requests one replica runs at once
    request_s: float = 2.0  # how long one request runs
    base_ttft_s: float = 0.12
    base_itl_s: float = 0.02
    tokens_per_s: float = 30.0  # per running request


@dataclass
class Replica:
    model: str
    runtime: str
    port: int = 0
    server: asyncio.AbstractServer | None = None
    ttft: list[float] = field(default_factory=lambda: [0.0] * (len(TTFT_BUCKETS) + 1))
    itl: list[float] = field(default_factory=lambda: [0.0] * (len(ITL_BUCKETS) + 1))
    sums: dict[str, float] = field(default_factory=lambda: {"ttft": 0.0, "itl": 0.0})
    tokens: float = 0.0
    active: int = 0  # requests this replica is answering now
    updated: float = field(default_factory=time.monotonic)


def _observe(buckets: list[float], bounds: tuple[float, ...], value: float, n: float) -> None:
    for i, le in enumerate(bounds):
        if value <= le:
            buckets[i] += n
            return
    buckets[-1] += n


class ModelServers:
    """Start and stop stand-in model servers by key (the allocation id); thread-safe."""

    def __init__(self, queue: QueueModel | None = None, host: str = "127.0.0.1") -> None:
        self.queue = queue or QueueModel()
        self.host = host
        self._offered: dict[str, float] = {}
        self._replicas: dict[str, Replica] = {}
        self._lock = threading.Lock()
        # Fault for tests: streamed answers stop after this many tokens, the connection cut.
        self.drop_streams_after: int | None = None
        self.api_key: str | None = None  # as vLLM's --api-key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="model-servers", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------ control

    def offer(self, model: str, concurrent: float) -> None:
        """The load the model's clients put on it now: requests in flight or waiting."""
        with self._lock:
            self._advance_model(model)
            self._offered[model] = max(float(concurrent), 0.0)

    def start(self, key: str, model: str, runtime: str = "vllm", port: int = 0) -> int:
        """Serve a replica of `model` on a loopback port (0: any free one); returns the port."""
        rep = Replica(model=model, runtime=runtime if runtime in NAMES else "vllm")
        fut = asyncio.run_coroutine_threadsafe(self._listen(rep, port), self._loop)
        rep.port = fut.result(timeout=5)
        with self._lock:
            self._advance_model(model)  # the share each replica gets changes now
            rep.updated = time.monotonic()
            self._replicas[key] = rep
        return rep.port

    def stop(self, key: str) -> None:
        with self._lock:
            rep = self._replicas.get(key)
            if rep is not None:
                self._advance_model(rep.model)
                del self._replicas[key]
        if rep is not None and rep.server is not None:
            self._loop.call_soon_threadsafe(rep.server.close)

    def close(self) -> None:
        for key in list(self._replicas):
            self.stop(key)
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(self._cancel_connections(), self._loop)
            done.result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _cancel_connections(self) -> None:
        """End the keep-alive connections still open, so that no task outlives the loop."""
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def ports(self) -> dict[str, int]:
        with self._lock:
            return {k: r.port for k, r in self._replicas.items()}

    # ------------------------------------------------------------ the model

    def _state(self, rep: Replica) -> tuple[float, float]:
        """(running, waiting) of one replica: the model's offered load shared evenly."""
        n = sum(1 for r in self._replicas.values() if r.model == rep.model) or 1
        share = self._offered.get(rep.model, 0.0) / n + rep.active
        running = min(share, self.queue.capacity)
        return running, max(share - running, 0.0)

    def _advance_model(self, model: str) -> None:
        for rep in self._replicas.values():
            if rep.model == model:
                self._advance(rep)

    def _advance(self, rep: Replica) -> None:
        """Record what the time since the last update observed, at the current state."""
        now = time.monotonic()
        dt, rep.updated = now - rep.updated, now
        if dt <= 0:
            return
        q = self.queue
        running, waiting = self._state(rep)
        finished = running / q.request_s * dt  # requests that got their first token
        ttft = q.base_ttft_s + waiting / q.capacity * q.request_s
        itl = q.base_itl_s * (1 + 0.5 * running / q.capacity)
        for factor, share in SPREAD:
            _observe(rep.ttft, TTFT_BUCKETS, ttft * factor, finished * share)
            _observe(rep.itl, ITL_BUCKETS, itl * factor, finished * share * 50)
        rep.sums["ttft"] += ttft * finished
        rep.sums["itl"] += itl * finished * 50
        rep.tokens += running * q.tokens_per_s * dt

    def metrics(self, key: str) -> str:
        with self._lock:
            rep = self._replicas[key]
            self._advance(rep)
            running, waiting = self._state(rep)
            kv = min(1.0, 0.05 + 0.85 * running / self.queue.capacity)
            kv = min(1.0, kv + 0.1 * min(waiting / self.queue.capacity, 1.0))
            return _page(rep, running, waiting, kv)

    # ------------------------------------------------------------ HTTP

    async def _listen(self, rep: Replica, port: int) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while await self._one_request(rep, reader, writer):
                    pass
            except (OSError, TimeoutError, ValueError, IndexError, asyncio.IncompleteReadError):
                pass
            except asyncio.CancelledError:
                pass  # closing: end quietly (a cancelled handler is logged by asyncio)
            finally:
                writer.close()

        rep.server = await asyncio.start_server(handle, self.host, port)
        return int(rep.server.sockets[0].getsockname()[1])

    async def _one_request(
        self, rep: Replica, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one HTTP/1.1 request; False when the connection is to close."""
        line = await asyncio.wait_for(reader.readline(), KEEP_ALIVE_S)
        if not line:
            return False
        method, target = line.split(b" ")[:2]
        headers: dict[bytes, bytes] = {}
        while (h := await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
            name, _, value = h.partition(b":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        keep = headers.get(b"connection", b"").lower() != b"close"
        path = target.decode().split("?")[0]
        if (
            self.api_key is not None
            and path.startswith("/v1")
            and (headers.get(b"authorization", b"") != b"Bearer " + self.api_key.encode())
        ):  # vLLM's --api-key: every /v1 route wants the bearer token
            _respond(writer, "401 Unauthorized", JSON, b'{"error": "Unauthorized"}', keep)
            await writer.drain()
            return keep
        if method == b"POST" and path in bodies.ENDPOINTS:
            return await self._complete(rep, path, body, reader, writer) and keep
        status, ctype, payload = self._answer(rep, path)
        _respond(writer, status, ctype, payload, keep)
        await writer.drain()
        return keep

    async def _complete(
        self, rep: Replica, path: str, raw: bytes, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:  # fmt: skip
        """An OpenAI request, at the pace of the queueing model: the first token after the
        TTFT the replica's load gives, then one token per inter-token latency."""
        try:
            ask = bodies.parse(path, raw, rep.model)
        except bodies.BadRequest as exc:
            payload = bodies.error_body(exc.status, str(exc), exc.param)
            _respond(writer, f"{exc.status} {_REASONS[exc.status]}", JSON, payload, True)
            await writer.drain()
            return True
        with self._lock:
            self._advance(rep)
            rep.active += 1
            ttft, itl = self._pace(rep)
        try:
            if not await _working(reader, ttft):
                return False  # the client went away: vLLM aborts the request
            tokens_s = 0.0 if ask.path == bodies.EMBEDDINGS else itl * max(ask.max_tokens - 1, 0)
            if not ask.stream:
                if not await _working(reader, tokens_s):
                    return False
                _respond(writer, "200 OK", JSON, bodies.whole(ask), True)
                await writer.drain()
                return True
            return await self._stream(ask, itl, writer)
        finally:
            with self._lock:
                self._advance(rep)
                rep.active -= 1

    async def _stream(self, ask: bodies.Ask, itl: float, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n"
        )
        events = bodies.Stream(ask)
        for i in range(ask.max_tokens):
            if i:
                await asyncio.sleep(itl)
            if self.drop_streams_after is not None and i >= self.drop_streams_after:
                return False  # the replica died mid-answer: no terminating chunk
            _chunk(writer, events.chunk(i))
            await writer.drain()
        _chunk(writer, events.end())
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    def _pace(self, rep: Replica) -> tuple[float, float]:
        """(TTFT, inter-token latency) of a request that arrives now, from the queueing model."""
        q = self.queue
        running, waiting = self._state(rep)
        return q.base_ttft_s + waiting / q.capacity * q.request_s, q.base_itl_s * (
            1 + 0.5 * running / q.capacity
        )

    def _answer(self, rep: Replica, path: str) -> tuple[str, str, bytes]:
        if path == "/health":
            return "200 OK", "text/plain", b""
        if path == "/v1/models":
            data = {"object": "list", "data": [{"id": rep.model, "object": "model"}]}
            return "200 OK", JSON, json.dumps(data).encode()
        if path == "/metrics":
            key = next((k for k, r in self._replicas.items() if r is rep), None)
            if key is not None:
                return "200 OK", "text/plain; version=0.0.4", self.metrics(key).encode()
        return "404 Not Found", "text/plain", b"not found"


async def _working(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Sleep `seconds`, False as soon as the client has closed the connection (the transport
    keeps reading, so the reader sees its end without being awaited)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if reader.at_eof():
            return False
        await asyncio.sleep(min(left, 0.05))
    return not reader.at_eof()


def _respond(
    writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes, keep: bool
) -> None:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
    )
    writer.write(head.encode() + body)


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _labels(rep: Replica) -> str:
    if rep.runtime == "sglang":
        return f'model_name="{rep.model}",engine_type="unified",tp_rank="0",pp_rank="0"'
    return f'model_name="{rep.model}",engine="0"'


def _histogram(name: str, labels: str, bounds: tuple[float, ...], counts: list[float],
               total: float) -> list[str]:  # fmt: skip
    lines = [f"# HELP {name} stand-in", f"# TYPE {name} histogram"]
    cum = 0.0
    for le, c in zip((*bounds, float("inf")), counts, strict=True):
        cum += c
        bound = "+Inf" if le == float("inf") else repr(le)
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cum!r}')
    lines.append(f"{name}_count{{{labels}}} {cum!r}")
    lines.append(f"{name}_sum{{{labels}}} {total!r}")
    return lines


def _page(rep: Replica, running: float, waiting: float, kv: float) -> str:
    names, labels = NAMES[rep.runtime], _labels(rep)
    lines = []
    for key, value in (("running", running), ("waiting", waiting), ("kv", kv)):
        lines += [f"# HELP {names[key]} stand-in", f"# TYPE {names[key]} gauge"]
        lines.append(f"{names[key]}{{{labels}}} {float(round(value)) if key != 'kv' else kv!r}")
    if rep.runtime == "sglang":
        gen = running * 30.0
        lines += ["# TYPE sglang:gen_throughput gauge", f"sglang:gen_throughput{{{labels}}} {gen}"]
    tok = names["tokens"]
    lines += [f"# TYPE {tok} counter", f"{tok}_total{{{labels}}} {rep.tokens!r}"]
    lines += _histogram(names["ttft"], labels, TTFT_BUCKETS, rep.ttft, rep.sums["ttft"])
    lines += _histogram(names["itl"], labels, ITL_BUCKETS, rep.itl, rep.sums["itl"])
    return "\n".join(lines) + "\n"
