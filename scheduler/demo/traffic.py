"""The demo's clients: real OpenAI requests through the gateway, as many at once per model as
the trace says. Each model has that many clients, each sending one request after another (one
in four streamed); when the trace falls, clients leave after their request. The gateway counts
what they make (in flight, held) into its demand key, which is what the scheduler scales on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

PAUSE_AFTER_ERROR_S = 1.0
MAX_TOKENS = 16


@dataclass
class TrafficStats:
    requests: int = 0
    errors: dict[int, int] = field(default_factory=dict)  # status (0: no answer) -> count


class Traffic:
    """Clients on an event loop of their own; `set_targets` from any thread."""

    def __init__(self, gateway_url: str) -> None:
        self.url = gateway_url
        self.stats = TrafficStats()
        self._targets: dict[str, int] = {}
        self._clients: dict[str, set[asyncio.Task[None]]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="demo-traffic")
        self._http: httpx.AsyncClient | None = None
        self._thread.start()

    def set_targets(self, targets: Mapping[str, int]) -> None:
        asyncio.run_coroutine_threadsafe(self._set(dict(targets)), self._loop).result(10)

    async def _set(self, targets: dict[str, int]) -> None:
        if self._http is None:
            limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
            self._http = httpx.AsyncClient(base_url=self.url, limits=limits, timeout=None)
        self._targets = targets
        for model, want in targets.items():
            tasks = self._clients.setdefault(model, set())
            for _ in range(want - len(tasks)):
                task = asyncio.create_task(self._client(model, len(tasks)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    async def _client(self, model: str, number: int) -> None:
        assert self._http is not None
        streamed = number % 4 == 3
        body = {"model": model, "max_tokens": MAX_TOKENS, "stream": streamed,
                "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
        me = asyncio.current_task()
        while True:
            clients = self._clients.get(model, set())
            if len(clients) > self._targets.get(model, 0):
                clients.discard(me)  # at once: the others count one fewer
                return
            status = await self._one(body)
            self.stats.requests += 1
            if status != 200:
                self.stats.errors[status] = self.stats.errors.get(status, 0) + 1
                await asyncio.sleep(PAUSE_AFTER_ERROR_S)

    async def _one(self, body: dict[str, object]) -> int:
        assert self._http is not None
        try:
            async with self._http.stream("POST", "/v1/chat/completions", json=body) as reply:
                async for _ in reply.aiter_raw():
                    pass
                return reply.status_code
        except httpx.HTTPError:
            return 0

    def stop(self) -> None:
        """End every client (their requests are cancelled), then the loop."""

        async def end() -> None:
            tasks = [t for ts in self._clients.values() for t in ts]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self._http is not None:
                await self._http.aclose()

        asyncio.run_coroutine_threadsafe(end(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
