"""Status records, metrics and the dashboard carry the core's reason codes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from scheduler.adapters.status_writer import status_record
from scheduler.core.models import ModelStatus, Plan, Snapshot, StopAction, StoppedReplica
from scheduler.ops.metrics import MetricsObserver

REASON = "still starting after 1900s, past its load grace of 1800s"


def _status() -> ModelStatus:
    return ModelStatus(
        desired=1,
        live=0,
        pending="waiting for preempted replicas to stop",
        pending_code="waiting_for_victims",
        timed_out=[StoppedReplica(replica="r-9", code="timed_out", reason=REASON)],
    )


def test_the_status_record_carries_the_pending_code_and_the_timed_out_replica() -> None:
    record = status_record(_status(), [], None)
    assert record["pending_code"] == "waiting_for_victims"
    assert record["timed_out"] == [{"replica": "r-9", "code": "timed_out", "reason": REASON}]
    assert status_record(None, [], None)["timed_out"] == []


def test_metrics_count_stops_and_pending_models_by_code() -> None:
    registry = CollectorRegistry()
    metrics = MetricsObserver(registry)
    plan = Plan(models={"a": _status(), "b": ModelStatus(desired=1, live=1)})
    metrics.pass_finished(Snapshot(now="2026-12-02T10:00:00Z"), plan, 0.01, [])
    stop = StopAction(replica="r-9", model="a", reason=REASON, code="timed_out")
    metrics.action_done(stop, True, None)
    metrics.action_done(stop, True, None)
    get = registry.get_sample_value
    assert get("llm_scheduler_stops_total", {"code": "timed_out"}) == 2
    assert get("llm_scheduler_models_pending_by_code", {"code": "waiting_for_victims"}) == 1
    metrics.pass_finished(Snapshot(now="2026-12-02T10:00:00Z"), Plan(), 0.01, [])
    assert get("llm_scheduler_models_pending_by_code", {"code": "waiting_for_victims"}) is None
