"""Each model's replicas, as Consul's health endpoint lists them, and how busy each one is.

A replica is dialled at `Service.Address` (or the node's address when that is empty, as
Consul's agent fills it in) and `Service.Port`: only what Consul says. Only a multi-node
replica's head registers the service, so a multi-node replica is reached through its head.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

# Past this KV-cache usage a replica starts to preempt or queue: count it as this many more
# open requests when full.
KV_HIGH = 0.9
KV_FULL_PENALTY = 8.0


@dataclass
class Replica:
    id: str  # the Consul service id
    url: str  # http://address:port
    passing: bool  # every check passing, as Consul says
    probed_ok: bool = False  # answered /health while Consul still lists it as not passing
    outstanding: int = 0  # requests this gateway has open on it
    waiting: float = 0.0  # its server's queue, from its metrics (0 when not read)
    kv_cache: float = 0.0  # its KV-cache usage, 0-1

    @property
    def usable(self) -> bool:
        return self.passing or self.probed_ok

    def load(self) -> float:
        """What two-choices compares: our open requests, its queue, a full KV cache."""
        full = max(self.kv_cache - KV_HIGH, 0.0) / (1.0 - KV_HIGH)
        return self.outstanding + self.waiting + KV_FULL_PENALTY * full


def parse_entries(entries: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
    """Service id -> (url, passing) from a /v1/health/service reply; malformed entries skipped."""
    found: dict[str, tuple[str, bool]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        service, node = entry.get("Service") or {}, entry.get("Node") or {}
        address = service.get("Address") or node.get("Address")
        port, sid = service.get("Port"), service.get("ID")
        if not address or not isinstance(port, int) or port <= 0 or not sid:
            continue
        checks = entry.get("Checks") or []
        passing = all(isinstance(c, dict) and c.get("Status") == "passing" for c in checks)
        host = f"[{address}]" if ":" in str(address) else address
        found[str(sid)] = (f"http://{host}:{port}", passing)
    return found


@dataclass
class ModelReplicas:
    """One model's replicas and the requests held until one of them is usable."""

    replicas: dict[str, Replica] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # When the first request was held while no replica was usable: the first held request to
    # get a replica ends the wake (an activation), which waited this long.
    waking_since: float | None = None

    def update(self, listed: dict[str, tuple[str, bool]]) -> None:
        """Take Consul's list; keep each known replica's counts and probe result."""
        fresh: dict[str, Replica] = {}
        for sid, (url, passing) in listed.items():
            old = self.replicas.get(sid)
            if old is not None and old.url == url:
                old.passing = passing
                old.probed_ok = old.probed_ok and not passing
                fresh[sid] = old
            else:
                fresh[sid] = Replica(id=sid, url=url, passing=passing)
        self.replicas = fresh
        self.wake()

    def wake(self) -> None:
        """Tell held requests to look again; the next change gets a fresh event."""
        self.changed.set()
        self.changed = asyncio.Event()

    def usable(self, exclude: set[str] | frozenset[str] = frozenset()) -> list[Replica]:
        return [r for r in self.replicas.values() if r.usable and r.id not in exclude]

    def starting(self) -> list[Replica]:
        return [r for r in self.replicas.values() if not r.usable]

    def pick(self, exclude: set[str] | frozenset[str] = frozenset()) -> Replica | None:
        """Least outstanding requests between two replicas chosen at random."""
        choices = self.usable(exclude)
        if len(choices) <= 1:
            return choices[0] if choices else None
        a, b = random.sample(choices, 2)
        return a if a.load() <= b.load() else b
