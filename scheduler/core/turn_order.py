"""The order models take their turn to grow (docs/decision-core.md, rules F1, F2)."""

from __future__ import annotations

from typing import NamedTuple

from scheduler.core.inventory import profile_need
from scheduler.core.models import CLASS_RANK, Model


class ModelOrder(NamedTuple):
    """Where a model places in a pass (rules F1, F2 aside): higher classes first, then models
    below their minimum; within that the models that can use the fewest devices (most
    constrained first), then the larger replica first (first-fit decreasing: small ones fill
    the gaps big ones leave, not the reverse), then by name."""

    neg_class_rank: int
    at_min: bool
    reach: int
    neg_gpus: float
    name: str


class TurnOrder(NamedTuple):
    """The order models take their turn: those that place within their owner's guarantee
    first, among them those others are held for; then the model's own order."""

    not_owed: bool
    not_claimed: bool
    model: ModelOrder


class ShareKey(NamedTuple):
    """Past the guarantees: class and minimum as always, then the owner with the least
    weighted dominant share once the replica is placed, then the model's own order."""

    neg_class_rank: int
    at_min: bool
    share: float
    order: ModelOrder


def model_order(m: Model, live: int, reach: int) -> ModelOrder:
    return ModelOrder(
        -CLASS_RANK[m.class_],
        live >= m.scaling.min,
        reach,
        -profile_need(m.profiles[0])[0],
        m.name,
    )
