"""The dashboard's recent past, kept in the service's memory: GPUs in use, pending models and
pass time over the last hour, and since when each pending model has waited.

Nothing is stored: a restarted service starts a new hour. Points are at least STEP_S apart (a
pass every few seconds would keep thousands), so an hour is at most WINDOW_S / STEP_S points;
within a step the latest counts stand and the slowest pass is kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

WINDOW_S = 3600.0
STEP_S = 10.0


@dataclass
class Point:
    at: float  # seconds since the epoch
    gpus_in_use: int
    pending: int
    pass_s: float


class History:
    def __init__(self, window_s: float = WINDOW_S, step_s: float = STEP_S) -> None:
        self.window_s = window_s
        self.step_s = step_s
        self._points: deque[Point] = deque()
        self._waiting_since: dict[str, float] = {}

    def add(self, at: float, gpus_in_use: int | None, pending: int | None, pass_s: float) -> None:
        """One pass. `None` counts (a pass carried over) keep the last ones."""
        last = self._points[-1] if self._points else None
        gpus = gpus_in_use if gpus_in_use is not None else (last.gpus_in_use if last else 0)
        waiting = pending if pending is not None else (last.pending if last else 0)
        if last is not None and at - last.at < self.step_s:
            last.gpus_in_use, last.pending = gpus, waiting
            last.pass_s = max(last.pass_s, pass_s)
        else:
            self._points.append(Point(at, gpus, waiting, pass_s))
        while self._points and self._points[0].at < at - self.window_s:
            self._points.popleft()

    def waiting(self, pending: list[str], at: float) -> dict[str, float]:
        """Since when each pending model has waited (seconds since the epoch); a model that
        stops waiting is forgotten, and waits anew from its next pending pass."""
        self._waiting_since = {m: self._waiting_since.get(m, at) for m in pending}
        return dict(self._waiting_since)

    def points(self) -> list[dict[str, float]]:
        return [
            {
                "at": p.at,
                "gpus_in_use": p.gpus_in_use,
                "pending": p.pending,
                "pass_s": round(p.pass_s, 4),
            }
            for p in self._points
        ]
