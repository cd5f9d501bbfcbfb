"""How many replicas a model wants (DESIGN.md section 6)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from scheduler.core.models import Demand, Model, Replica


def last_used(demand: Demand | None, replicas: Iterable[Replica]) -> datetime | None:
    """The latest use anyone recorded: the gateway's demand, or the replicas' own marks."""
    stamps = [r.last_used_at for r in replicas if r.last_used_at is not None]
    if demand is not None and demand.last_used is not None:
        stamps.append(demand.last_used)
    return max(stamps) if stamps else None


def idle_seconds(used: datetime | None, now: datetime) -> float:
    """Seconds since last use; no record at all counts as idle since forever."""
    if used is None:
        return math.inf
    return max((now - used).total_seconds(), 0.0)


def desired_replicas(
    model: Model,
    demand: Demand | None,
    replicas: Iterable[Replica],
    now: datetime,
    eviction_grace_s: float,
) -> int:
    """ceil(load / target) clamped to [min, max]; idle on-demand models want 0, busy ones >= 1."""
    scaling = model.scaling
    if demand is None:
        if scaling.on_demand:
            idle = idle_seconds(last_used(None, replicas), now)
            return 0 if idle >= eviction_grace_s else scaling.min
        return scaling.min
    load = demand.inflight + demand.queued
    want = min(max(math.ceil(load / scaling.target_per_replica), scaling.min), scaling.max)
    if scaling.on_demand:
        if load > 0:
            return max(want, 1) if scaling.max > 0 else 0
        if idle_seconds(last_used(demand, replicas), now) >= eviction_grace_s:
            return 0
        # Used within eviction_grace_s: one replica stays whatever the minimum (with min 0
        # the idle model would otherwise go on the first pass without load).
        return max(want, 1) if scaling.max > 0 else 0
    return want
