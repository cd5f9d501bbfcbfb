"""The service exports each model's scaling signals and what they ask for."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.core.models import Load, ModelStatus, Plan, Snapshot
from scheduler.ops.metrics import MetricsObserver


def _snap(load: dict[str, Load]) -> Snapshot:
    return Snapshot(now=datetime(2026, 12, 2, 10, 0, tzinfo=UTC), load=load)


def test_signals_per_model_are_exported_and_forgotten() -> None:
    obs = MetricsObserver()
    plan = Plan(models={"chat": ModelStatus(desired=3, live=2, recommended=3)})
    obs.pass_finished(
        _snap({"chat": Load(ttft_p90_ms=840, kv_cache=0.41, reporting=2)}), plan, 0.1, []
    )
    text = obs.exposition().decode()
    assert 'llm_scheduler_model_signal{model="chat",signal="ttft_p90_ms"} 840.0' in text
    assert 'llm_scheduler_model_signal{model="chat",signal="kv_cache"} 0.41' in text
    assert 'llm_scheduler_model_signal{model="chat",signal="recommended"} 3.0' in text
    assert 'signal="itl_p90_ms"' not in text  # no reading, no series
    obs.pass_finished(_snap({}), Plan(), 0.1, [])
    assert "llm_scheduler_model_signal{" not in obs.exposition().decode()
