"""What one gateway process knows: the catalog, each model's replicas and demand counts, and
whether Consul is answering. Filled by the watches (watch.py), read by the request path."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.gateway.catalog import ModelEntry
from scheduler.gateway.replicas import ModelReplicas


@dataclass
class Counts:
    inflight: int = 0  # requests on a replica now
    queued: int = 0  # requests held until a replica is usable
    last_used: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"inflight": self.inflight, "queued": self.queued}
        if self.last_used is not None:
            out["last_used"] = self.last_used.strftime("%Y-%m-%dT%H:%M:%SZ")
        return out


@dataclass
class ConsulHealth:
    """The latest outcome of each kind of Consul call, for /healthz."""

    failures: dict[str, str] = field(default_factory=dict)  # what -> last error

    def ok(self, what: str) -> None:
        self.failures.pop(what, None)

    def failed(self, what: str, error: str) -> None:
        self.failures[what] = error


@dataclass
class GatewayState:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    catalog_read: bool = False  # the catalog was read at least once
    replicas: dict[str, ModelReplicas] = field(default_factory=dict)
    counts: dict[str, Counts] = field(default_factory=dict)
    statuses: dict[str, Any] = field(default_factory=dict)  # model -> status record
    consul: ConsulHealth = field(default_factory=ConsulHealth)
    # Bumped on every change of the counts: the demand writer compares it.
    version: int = 0
    draining: bool = False
    # The latest wakes from zero: (model, how long its first held request waited).
    wakes: deque[tuple[str, float]] = field(default_factory=lambda: deque(maxlen=1000))
    started: float = field(default_factory=time.monotonic)

    def of(self, model: str) -> ModelReplicas:
        found = self.replicas.get(model)
        if found is None:
            found = self.replicas[model] = ModelReplicas()
        return found

    def count(self, model: str) -> Counts:
        found = self.counts.get(model)
        if found is None:
            found = self.counts[model] = Counts()
        return found

    def change(self, model: str, inflight: int = 0, queued: int = 0) -> None:
        c = self.count(model)
        c.inflight += inflight
        c.queued += queued
        c.last_used = datetime.now(UTC)
        self.version += 1

    def woke(self, model: str, waited_s: float) -> None:
        self.wakes.append((model, waited_s))

    def busy(self) -> bool:
        return any(c.inflight or c.queued for c in self.counts.values())
