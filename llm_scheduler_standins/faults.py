"""Fault injection for the stand-ins, switchable while they run.

Rules match a path prefix (`/v1/kv/`, `/v1/jobs`); the longest matching prefix wins.
`drop_rate` closes the connection without an answer, `error_rate` answers 500 with a
plain-text body as the real servers do, `latency_s` delays the answer. An index reset is
the stand-in's own business (see `index_reset` callbacks); this module only carries the switch.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class DroppedConnection(Exception):
    """Raised inside the ASGI app so the server closes the socket without a response."""


@dataclass(frozen=True)
class FaultRule:
    latency_s: float = 0.0
    error_rate: float = 0.0
    drop_rate: float = 0.0


class Faults:
    """Thread-safe table of fault rules, plus hooks the stand-ins run on `reset_index()`."""

    def __init__(self, seed: int | None = None) -> None:
        self._rules: dict[str, FaultRule] = {}
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._index_reset_hooks: list[Callable[[], None]] = []

    def set(
        self,
        prefix: str,
        *,
        latency_s: float = 0.0,
        error_rate: float = 0.0,
        drop_rate: float = 0.0,
    ) -> None:
        for name, rate in (("error_rate", error_rate), ("drop_rate", drop_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {rate}")
        if latency_s < 0:
            raise ValueError(f"latency_s must not be negative, got {latency_s}")
        with self._lock:
            self._rules[prefix] = FaultRule(latency_s, error_rate, drop_rate)

    def clear(self, prefix: str | None = None) -> None:
        with self._lock:
            if prefix is None:
                self._rules.clear()
            else:
                self._rules.pop(prefix, None)

    def rule_for(self, path: str) -> FaultRule | None:
        with self._lock:
            matches = [p for p in self._rules if path.startswith(p)]
            return self._rules[max(matches, key=len)] if matches else None

    def roll(self) -> float:
        with self._lock:
            return self._random.random()

    def on_index_reset(self, hook: Callable[[], None]) -> None:
        self._index_reset_hooks.append(hook)

    def reset_index(self) -> None:
        """Make the next blocking answers carry a lower index, as after a server restore."""
        for hook in list(self._index_reset_hooks):
            hook()


class FaultMiddleware:
    """ASGI middleware applying `Faults` to HTTP requests."""

    def __init__(self, app: Any, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rule = self.faults.rule_for(scope.get("path", ""))
        if rule is None:
            await self.app(scope, receive, send)
            return
        if rule.latency_s:
            await asyncio.sleep(rule.latency_s)
        if rule.drop_rate and self.faults.roll() < rule.drop_rate:
            # Raising before a response has started makes uvicorn close the connection.
            raise DroppedConnection(scope.get("path", ""))
        if rule.error_rate and self.faults.roll() < rule.error_rate:
            body = b"injected fault: internal server error"
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
