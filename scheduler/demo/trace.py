"""The demand trace: requests per model over the demo, rising, peaking past capacity, falling.

Time is the fraction of the demo that has passed (0..1), so any --duration plays all of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.core.models import Demand


@dataclass(frozen=True)
class Curve:
    peak: int  # in-flight + queued requests at the top
    at: float = 0.5  # when this model peaks (fraction of the demo)
    width: float = 0.22  # how long the busy part lasts
    floor: int = 0  # requests outside the busy part
    until: float = 1.0  # batch work: constant demand that ends here

    def load(self, t: float) -> int:
        if self.until < 1.0:
            return self.peak if t < self.until else 0
        bump = math.exp(-(((t - self.at) / self.width) ** 2))
        return round(self.floor + (self.peak - self.floor) * bump)


CURVES: dict[str, Curve] = {
    "llama-3-70b": Curve(peak=64, at=0.5, floor=8),
    "qwen-2.5-32b": Curve(peak=48, at=0.45, floor=6),
    "mixtral-8x7b": Curve(peak=48, at=0.55, floor=0),
    "llama-3-8b": Curve(peak=96, at=0.5, floor=12),
    "deepseek-coder-33b": Curve(peak=24, at=0.4, width=0.15),
    "gemma-2-27b": Curve(peak=24, at=0.6, width=0.15),
    "llama-3-405b-eval": Curve(peak=4, until=0.8),
    "finetune-eval-70b": Curve(peak=8, until=0.9),
    "phi-3-mini": Curve(peak=96, at=0.35, width=0.2),
    "bge-embed": Curve(peak=128, at=0.5, width=0.3, floor=10),
}


def phase(t: float) -> str:
    if t < 0.3:
        return "rising"
    if t < 0.65:
        return "peak"
    return "falling"


def demand_at(t: float) -> dict[str, Demand]:
    """inflight and queued for every model at time t; past capacity the queue grows."""
    out = {}
    for name, curve in CURVES.items():
        load = curve.load(t)
        queued = load // 4
        out[name] = Demand(inflight=load - queued, queued=queued)
    return out
