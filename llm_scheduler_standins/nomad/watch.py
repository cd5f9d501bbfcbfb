"""Wake blocking queries, which wait on asyncio event loops, from writes made on any thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


class Subscription:
    """Created before reading state, so a change between the read and the wait is not lost."""

    def __init__(self, feed: ChangeFeed) -> None:
        self._feed = feed
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def fire(self) -> None:
        # A closed loop means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """Wait for a change; True if one came. Re-arms for the next wait."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout=max(timeout, 0))
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()

    def __enter__(self) -> Subscription:
        self._feed._add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._feed._remove(self)


class ChangeFeed:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: set[Subscription] = set()

    def subscribe(self) -> Subscription:
        return Subscription(self)

    def notify(self) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.fire()

    def _add(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.add(sub)

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)
