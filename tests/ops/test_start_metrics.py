"""llm_scheduler_starts counts the replicas started, warm where the head node's model cache held
the model's revision as last reported, cold elsewhere (no cache, another revision, no report);
llm_scheduler_time_to_ready_seconds observes each start once, when its replica is ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from scheduler.core.fleet import CachedSnapshot, NodeCache, Replica
from scheduler.core.models import Model, Node, Plan, Shard, Snapshot, StartAction
from scheduler.ops.metrics import MetricsObserver

A = "a" * 40


def _snapshot() -> Snapshot:
    cache = NodeCache(
        volume="llm-model-cache",
        snapshots=[CachedSnapshot(source="org/m", commit=A, revisions=["main"], bytes=10)],
    )
    nodes = [
        Node(id="warm", name="w", cpu_cores=8, memory_gb=64, cache=cache),
        Node(id="cold", name="c", cpu_cores=8, memory_gb=64),
    ]
    models = [
        Model.model_validate(
            {"name": name, "owner": "org/a", "profiles": [{"name": "p"}], "serve": serve}
        )
        for name, serve in (
            ("m", {"source": "org/m"}),
            ("m-v2", {"source": "org/m", "revision": "v2"}),
        )
    ]
    return Snapshot(now=datetime(2026, 12, 5, tzinfo=UTC), nodes=nodes, models=models)


def _start(model: str, node: str) -> StartAction:
    return StartAction(
        model=model, profile="p", replica=f"{model}-{node}", shards=[Shard(node=node)], reason="t"
    )


def _starts(metrics: MetricsObserver) -> dict[tuple[str, str], float]:
    text = metrics.exposition().decode()
    return {
        (s.labels["model"], s.labels["cache"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "llm_scheduler_starts"
        for s in family.samples
        if s.name == "llm_scheduler_starts_total"
    }


def test_starts_are_counted_warm_or_cold_by_the_head_nodes_cache() -> None:
    metrics = MetricsObserver()
    metrics.pass_finished(_snapshot(), Plan(), 0.01, [])
    metrics.action_done(_start("m", "warm"), True, None)
    metrics.action_done(_start("m", "cold"), True, None)
    metrics.action_done(_start("m-v2", "warm"), True, None)  # another revision: cold
    metrics.action_done(_start("m", "warm"), False, "nomad said no")  # not started
    assert _starts(metrics) == {("m", "warm"): 1, ("m", "cold"): 1, ("m-v2", "cold"): 1}


def _ready_histogram(metrics: MetricsObserver) -> dict[tuple[str, str, str], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, s.labels["model"], s.labels["cache"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "llm_scheduler_time_to_ready_seconds"
        for s in family.samples
        if s.name.endswith(("_count", "_sum"))
    }


def test_time_to_ready_is_observed_once_by_the_warmth_the_start_had() -> None:
    metrics = MetricsObserver()
    snap = _snapshot()
    metrics.pass_finished(snap, Plan(), 0.01, [])
    metrics.action_done(_start("m", "warm"), True, None)
    metrics.action_done(_start("m", "cold"), True, None)
    t0 = snap.now

    def replica(rid: str, ready_s: float | None) -> Replica:
        ready = t0 + timedelta(seconds=ready_s) if ready_s is not None else None
        state = "running" if ready else "starting"
        return Replica(id=rid, model="m", profile="p", state=state, created_at=t0, ready_at=ready)

    starting = [replica("m-warm", None), replica("m-cold", None)]
    metrics.pass_finished(snap.model_copy(update={"replicas": starting}), Plan(), 0.01, [])
    assert _ready_histogram(metrics) == {}
    ready = [replica("m-warm", 40.0), replica("m-cold", 300.0)]
    for _ in range(2):  # seen ready twice: observed once
        metrics.pass_finished(snap.model_copy(update={"replicas": ready}), Plan(), 0.01, [])
    assert _ready_histogram(metrics) == {
        ("llm_scheduler_time_to_ready_seconds_count", "m", "warm"): 1,
        ("llm_scheduler_time_to_ready_seconds_sum", "m", "warm"): 40.0,
        ("llm_scheduler_time_to_ready_seconds_count", "m", "cold"): 1,
        ("llm_scheduler_time_to_ready_seconds_sum", "m", "cold"): 300.0,
    }
