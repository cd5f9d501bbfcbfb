"""Models whose jobs cannot be made: each is retried only after a backoff that doubles, and at
once when the model is edited (its fingerprint changes)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import structlog

from scheduler.core.models import Model

log = structlog.get_logger("llm-scheduler.act")

# A model whose template or serve spec is broken is retried after this, doubling up to the max.
TEMPLATE_BACKOFF_MIN_S = 30.0
TEMPLATE_BACKOFF_MAX_S = 900.0


@dataclass
class _Broken:
    error: str
    delay_s: float
    retry_at: float
    fingerprint: str  # the model as it was: an edited model is tried again at once


def _fingerprint(model: Model) -> str:
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()


class Unservable:
    """model -> why its jobs cannot be made, and when to try again."""

    def __init__(self) -> None:
        self._broken: dict[str, _Broken] = {}

    def record(self, model: Model, error: str, now: float) -> None:
        """Record once, log once, and back off: no new job attempt until retry_at."""
        fingerprint = _fingerprint(model)
        known = self._broken.get(model.name)
        if known is not None and known.fingerprint != fingerprint:
            known = None  # the model was edited since: a fresh start
        delay = (
            TEMPLATE_BACKOFF_MIN_S
            if known is None
            else min(known.delay_s * 2, TEMPLATE_BACKOFF_MAX_S)
        )
        if known is None or known.error != error:
            log.error("model_unservable", model=model.name, error=error, retry_in_s=delay)
        self._broken[model.name] = _Broken(error, delay, now + delay, fingerprint)

    def backing_off(self, model: Model, now: float) -> bool:
        known = self._broken.get(model.name)
        return (
            known is not None and known.fingerprint == _fingerprint(model) and now < known.retry_at
        )

    def healed(self, name: str) -> None:
        self._broken.pop(name, None)

    def keep_only(self, models: set[str]) -> None:
        """Forget the backoff of models deleted from the catalog."""
        for gone in set(self._broken) - models:
            del self._broken[gone]
