"""Decayed usage (docs/decision-core.md, rule F4): what each owner held recently, in GPU-seconds
decayed with `settings.usage_half_life_s`, so that an owner who used much lately comes after
the others for free room (rule F2) and yields first toward fair share (rule R7), as KAI's
time-based fair share and Kueue's admission fair sharing do. Off (0) by default.

The usage is carried from pass to pass through the plan (`Plan.usage`, handed back as
`Snapshot.usage`; the service keeps it in KV): each pass decays what was carried to `now` and
adds what the owner holds now over the time since, as if it held that all along (a pass's
error is one interval's worth). With a steady holding H, the usage tends to H x tau, tau the
half-life over ln 2: its fraction of the fleet's GPUs over tau is the owner's recent share of
the fleet, between 0 and 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

from scheduler.core.facts import LiveReplica
from scheduler.core.models import OwnerUsage, Snapshot

LN2 = math.log(2.0)
FORGOTTEN = 1.0  # GPU-seconds under which an owner's usage is dropped


def _decay(seconds: float, half_life_s: float) -> float:
    return 0.5 ** (max(seconds, 0.0) / half_life_s)


def decayed(u: OwnerUsage, now: datetime, half_life_s: float) -> float:
    """The usage, in GPU-seconds, decayed to `now` (a record stamped later is taken as is)."""
    return u.gpu_s * _decay((now - u.at).total_seconds(), half_life_s)


def recent_share(snap: Snapshot, capacity_gpus: float) -> dict[str, float]:
    """Per owner (as accounted: its quota node), its recent usage as a fraction of the fleet's
    GPUs over tau; empty when the setting is off."""
    half = snap.settings.usage_half_life_s
    if half <= 0 or capacity_gpus <= 0:
        return {}
    tau = half / LN2
    return {
        node: min(decayed(u, snap.now, half) / (tau * capacity_gpus), 1.0)
        for node, u in snap.usage.items()
    }


def carried(snap: Snapshot, held: dict[str, float]) -> dict[str, OwnerUsage]:
    """The usage to hand on: each owner's decayed to now, plus what it holds (`held`, GPUs per
    quota node) over the time since its record, decayed as it accrued."""
    half = snap.settings.usage_half_life_s
    if half <= 0:
        return {}
    tau, now = half / LN2, snap.now
    out: dict[str, OwnerUsage] = {}
    for node in sorted(snap.usage.keys() | held.keys()):
        u = snap.usage.get(node)
        elapsed = max((now - u.at).total_seconds(), 0.0) if u is not None else 0.0
        keep = _decay(elapsed, half)
        gpu_s = (u.gpu_s if u is not None else 0.0) * keep + held.get(node, 0.0) * tau * (1 - keep)
        if gpu_s >= FORGOTTEN or held.get(node, 0.0) > 0:
            out[node] = OwnerUsage(gpu_s=gpu_s, at=now)
    return out


def held_by_owner(live: list[LiveReplica], node_of: Callable[[str], str]) -> dict[str, float]:
    """The GPUs each owner's live replicas hold, per quota node."""
    held: dict[str, float] = {}
    for lr in live:
        node = node_of(lr.model.owner)
        held[node] = held.get(node, 0.0) + lr.need[0]
    return held
