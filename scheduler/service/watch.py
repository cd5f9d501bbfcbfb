"""Blocking-query watches that wake the pass loop.

Index rules (Consul's and Nomad's docs): the first read is not blocking (never wait on 0);
an index that goes backwards (a server restore) resets to 0; errors back off with jitter.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("llm-scheduler.watch")


def next_index(old: int, new: int) -> int:
    """The index to wait on next: 0 when it went backwards or is missing (read non-blocking)."""
    if new <= 0 or new < old:
        return 0
    return new


class Backoff:
    """Exponential backoff with full jitter."""

    def __init__(self, base_s: float = 0.2, cap_s: float = 10.0) -> None:
        self.base_s, self.cap_s, self.attempt = base_s, cap_s, 0

    def next(self) -> float:
        self.attempt += 1
        return random.uniform(0, min(self.cap_s, self.base_s * 2**self.attempt))

    def reset(self) -> None:
        self.attempt = 0


class BlockingWatch:
    """Calls `fetch(index) -> new index` in a loop and `on_change()` whenever the index moves."""

    def __init__(
        self,
        name: str,
        fetch: Callable[[int], int],
        on_change: Callable[[], None],
        stop: threading.Event,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = name
        self.fetch = fetch
        self.on_change = on_change
        self.stop_event = stop
        self.backoff = backoff or Backoff()
        self.thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        # For /healthz: when a read last succeeded, and why the last one failed.
        self.last_ok = time.monotonic()
        self.last_error: str | None = None
        # Moves with every answer at a new index and every failure, before the pass is woken:
        # a pass carried over (carry.py) needs every watch's version unchanged since its view.
        self.version = 0

    def stale_for(self, now: float) -> float:
        """Seconds since the last successful read (0 while reads succeed)."""
        return 0.0 if self.last_error is None else now - self.last_ok

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        index = 0
        while not self.stop_event.is_set():
            try:
                new = self.fetch(index)
            except Exception as exc:  # any read failure: back off, then read non-blocking
                if self.stop_event.is_set():
                    return  # the service is stopping and closed its clients under this read
                delay = self.backoff.next()
                self.version += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("watch_error", watch=self.name, error=str(exc), retry_in_s=delay)
                index = 0
                self.stop_event.wait(delay)
                continue
            self.backoff.reset()
            self.last_ok, self.last_error = time.monotonic(), None
            if new != index:
                self.version += 1
                self.on_change()
            index = next_index(index, new)
