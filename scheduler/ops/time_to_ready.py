"""Expected start-to-ready time per model, warm (its revision in the node's cache) or cold.

Pure: an exponentially weighted mean of the observed times per (model, warmth), and until a
model has one, a default from its weight size: a cold start downloads then loads the weights,
a warm one only loads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scheduler.adapters.ready_state import (
    MAX_SECONDS,
    WARMTHS,
    Observed,
    Warmth,
    parse_observed,
)
from scheduler.core.fleet import NodeCache, Replica
from scheduler.core.models import Settings, Snapshot, StartAction
from scheduler.core.warmth import SERVER_OVERHEAD_S

__all__ = [
    "MAX_SECONDS",
    "SERVER_OVERHEAD_S",
    "WARMTHS",
    "Observed",
    "ReadyEstimates",
    "ReadyTracker",
    "Warmth",
]

# A recent start weighs this much against the mean of the earlier ones: a node's disk or
# network that changed shows within a few starts, one slow start does not swing it all.
WEIGHT_OF_NEWEST = 0.3
# The settings' defaults (download_gbps, load_gbps).
DEFAULT_DOWNLOAD_GBPS = Settings().download_gbps
DEFAULT_LOAD_GBPS = Settings().load_gbps


@dataclass
class ReadyEstimates:
    """Observed means per model and warmth; `seen` answers whether an estimate is learned."""

    observed: dict[tuple[str, Warmth], Observed] = field(default_factory=dict)

    def observe(self, model: str, warmth: Warmth, seconds: float) -> bool:
        """One replica's start-to-ready time; False (and nothing learned) when it is not a
        time: negative (clocks apart), not finite, or over a day."""
        if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
            return False
        old = self.observed.get((model, warmth))
        if old is None:
            self.observed[(model, warmth)] = Observed(seconds, 1)
            return True
        mean = old.mean_s + WEIGHT_OF_NEWEST * (seconds - old.mean_s)
        self.observed[(model, warmth)] = Observed(mean, old.count + 1)
        return True

    def expected_s(
        self,
        model: str,
        warmth: Warmth,
        weight_bytes: int | None,
        download_gbps: float = DEFAULT_DOWNLOAD_GBPS,
        load_gbps: float = DEFAULT_LOAD_GBPS,
    ) -> float | None:
        """The learned mean, else the default from the weight size; None when neither is known."""
        seen = self.observed.get((model, warmth))
        if seen is not None:
            return seen.mean_s
        return default_s(warmth, weight_bytes, download_gbps, load_gbps)

    def to_json(self) -> dict[str, Any]:
        models: dict[str, dict[str, Any]] = {}
        for (model, warmth), seen in sorted(self.observed.items()):
            models.setdefault(model, {})[warmth] = {"mean_s": seen.mean_s, "count": seen.count}
        return {"models": models}

    @classmethod
    def from_json(cls, data: Any, key: str, problems: list[str]) -> ReadyEstimates:
        """A bad part is left out with a line naming the key and field; the rest stands."""
        return cls(parse_observed(data, key, problems))


def start_warmth(
    action: StartAction, serve: tuple[str, str | None] | None, caches: dict[str, NodeCache]
) -> Warmth:
    """Warm where the head node's cache (as last reported) holds the model's revision."""
    cache = caches.get(action.shards[0].node) if action.shards else None
    return "warm" if serve is not None and cache is not None and cache.holds(*serve) else "cold"


def default_s(
    warmth: Warmth, weight_bytes: int | None, download_gbps: float, load_gbps: float
) -> float | None:
    """Seconds to ready from the weight size alone: (download and) load, plus the server's own."""
    if weight_bytes is None or weight_bytes <= 0 or download_gbps <= 0 or load_gbps <= 0:
        return None
    bits = weight_bytes * 8
    load = bits / (load_gbps * 1e9)
    download = 0.0 if warmth == "warm" else bits / (download_gbps * 1e9)
    return SERVER_OVERHEAD_S + download + load


def spoken(seconds: float) -> str:
    """'about 40 s', 'about 6 min', 'about 1.5 h': rounded as a person would say it."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


@dataclass
class ReadyTracker:
    """Pairs each start (its warmth decided when it was sent) with the pass that first sees
    its replica ready; a replica that went away before it was ready is forgotten."""

    estimates: ReadyEstimates = field(default_factory=ReadyEstimates)
    _starting: dict[str, tuple[str, Warmth]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    # As of the last pass seen: each node's model cache, each model's (source, revision).
    _caches: dict[str, NodeCache] = field(default_factory=dict)
    _serves: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    def started(self, replica: str, model: str, warmth: Warmth) -> None:
        self._starting[replica] = (model, warmth)

    def start_sent(self, action: StartAction) -> Warmth:
        """A start sent: its warmth, decided from the caches of the last pass seen."""
        warmth = start_warmth(action, self._serves.get(action.model), self._caches)
        self.started(action.replica, action.model, warmth)
        return warmth

    def pass_seen(self, snapshot: Snapshot) -> list[tuple[str, Warmth, float]]:
        """Keep the pass's caches for the starts to come; the starts it shows ready."""
        self._caches = {n.id: n.cache for n in snapshot.nodes if n.cache is not None}
        self._serves = {
            m.name: (m.serve.source, m.serve.revision) for m in snapshot.models if m.serve
        }
        return self.passed(snapshot.replicas)

    def passed(self, replicas: list[Replica]) -> list[tuple[str, Warmth, float]]:
        """The starts that became ready in this pass: (model, warmth, seconds), each once."""
        ready: list[tuple[str, Warmth, float]] = []
        present = {r.id: r for r in replicas}
        for replica_id, (model, warmth) in list(self._starting.items()):
            rep = present.get(replica_id)
            if rep is None:
                if replica_id in self._seen:  # it went before it was ready
                    del self._starting[replica_id]
                    self._seen.discard(replica_id)
                continue
            self._seen.add(replica_id)
            if rep.ready_at is None:
                continue
            del self._starting[replica_id]
            self._seen.discard(replica_id)
            seconds = (rep.ready_at - rep.created_at).total_seconds()
            if self.estimates.observe(model, warmth, seconds):
                ready.append((model, warmth, seconds))
        return ready


def ready_sentence(
    warm_s: float | None, cold_s: float | None, warm_nodes: list[str], learned: dict[str, int]
) -> str:
    """'warm on gpu-h100-3: about 40 s; cold elsewhere: about 6 min' (learned from 3 starts)."""
    parts = []
    if warm_nodes:
        shown = ", ".join(warm_nodes[:3]) + (
            f" (+{len(warm_nodes) - 3})" if len(warm_nodes) > 3 else ""
        )
        parts.append(f"warm on {shown}: {spoken(warm_s) if warm_s is not None else 'unknown'}")
    cold = spoken(cold_s) if cold_s is not None else "unknown (weight size not known)"
    parts.append(f"cold{' elsewhere' if warm_nodes else ''}: {cold}")
    seen = sum(learned.values())
    basis = f"learned from {seen} start{'s' if seen != 1 else ''}" if seen else "from weight size"
    return "; ".join(parts) + f" ({basis})"
