"""Prometheus metrics of the service, fed by a PassObserver; each instance has its own registry."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.ops.inventory import usage
from scheduler.ops.time_to_ready import ReadyTracker

CONTENT_TYPE = CONTENT_TYPE_LATEST
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
REPLICA_STATES = ("starting", "running", "stopping")
# Start-to-ready seconds: a warm load of a small model to a cold download of a large one.
READY_BUCKETS = (10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)

# One metric per quantity, in base units: Load field -> (metric, help, factor to base unit).
SIGNAL_METRICS: dict[str, tuple[str, str, float]] = {
    "running": (
        "llm_scheduler_model_requests_running",
        "Requests the model's servers are running, summed over its replicas.",
        1.0,
    ),
    "waiting": (
        "llm_scheduler_model_requests_waiting",
        "Requests queued in the model's servers, summed over its replicas.",
        1.0,
    ),
    "kv_cache": (
        "llm_scheduler_model_kv_cache_usage_ratio",
        "Mean KV-cache usage of the model's replicas (0 to 1).",
        1.0,
    ),
    "ttft_p90_ms": (
        "llm_scheduler_model_time_to_first_token_p90_seconds",
        "90th percentile of the time to first token over the signal window.",
        0.001,
    ),
    "itl_p90_ms": (
        "llm_scheduler_model_inter_token_latency_p90_seconds",
        "90th percentile of the time between output tokens over the signal window.",
        0.001,
    ),
    "tokens_per_s": (
        "llm_scheduler_model_generation_tokens_per_second",
        "Tokens the model's replicas generate per second, summed.",
        1.0,
    ),
    "reporting": (
        "llm_scheduler_model_replicas_reporting",
        "Replicas whose servers reported the model's signals.",
        1.0,
    ),
}


def _build_labels() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import scheduler

    try:
        release = version("llm-scheduler")
    except PackageNotFoundError:
        release = scheduler.__version__
    return {"version": release, "core": scheduler.CORE_BUILD}


class MetricsObserver:
    """Implements scheduler.service.observer.PassObserver."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._pass_metrics(self.registry)
        self._fleet_metrics(self.registry)
        self._service_metrics(self.registry)
        self.health_check: Callable[[], dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._classes: dict[str, str] = {}
        self._known: set[tuple[str, str]] = set()
        self._signals_known: set[tuple[str, str]] = set()
        self._standing_errors: set[str] = set()
        self._desired_known: set[str] = set()
        self._ready = ReadyTracker()  # starts waiting to be seen ready

    def _pass_metrics(self, r: CollectorRegistry) -> None:
        """What each pass decided, per model."""
        self.pass_duration = Histogram(
            "llm_scheduler_pass_duration_seconds",
            "Time of one reconcile pass.",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.models_pending = Gauge(
            "llm_scheduler_models_pending", "Models below their desired replicas.", registry=r
        )
        self.models = Gauge("llm_scheduler_models", "Models in the catalog.", registry=r)
        self.replicas = Gauge(
            "llm_scheduler_replicas", "Replicas by model and state.", ["model", "state"], registry=r
        )
        self.desired = Gauge(
            "llm_scheduler_replicas_desired", "Desired replicas by model.", ["model"], registry=r
        )
        # What the model servers report, per model, as the core saw it.
        self.signals = {
            field: Gauge(name, text, ["model"], registry=r)
            for field, (name, text, _) in SIGNAL_METRICS.items()
        }
        self.recommended = Gauge(
            "llm_scheduler_replicas_recommended",
            "Replicas the model's signals ask for, before the scale-down window.",
            ["model"],
            registry=r,
        )

    def _fleet_metrics(self, r: CollectorRegistry) -> None:
        # allocated + free = all: sum() over the states is the fleet.
        self.gpus = Gauge(
            "llm_scheduler_gpus",
            "Whole GPUs (not in MIG mode) by state (allocated or free).",
            ["state"],
            registry=r,
        )
        self.mig_slices = Gauge(
            "llm_scheduler_mig_slices",
            "MIG slices by state (allocated or free).",
            ["state"],
            registry=r,
        )
        for state in ("allocated", "free"):
            self.gpus.labels(state)
            self.mig_slices.labels(state)

    def _reason_metrics(self, r: CollectorRegistry) -> None:
        """Stops and pending models by their reason's code."""
        self.stops = Counter(
            "llm_scheduler_stops",
            "Replicas stopped, by the reason's code (scale_down, timed_out, preempted_..., "
            "see docs/decision-core.md).",
            ["code"],
            registry=r,
        )
        self.pending_by_code = Gauge(
            "llm_scheduler_models_pending_by_code",
            "Models below their desired replicas, by the pending reason's code.",
            ["code"],
            registry=r,
        )

    def _service_metrics(self, r: CollectorRegistry) -> None:
        """What the service did: actions, errors, passes, leadership, build."""
        self.preemptions = Counter(
            "llm_scheduler_preemptions",
            "Replicas stopped to make room, by the victim's class.",
            ["class"],
            registry=r,
        )
        self.errors = Counter(
            "llm_scheduler_errors",
            "Errors by kind (input: a bad KV value, once when it appears; "
            "start/stop: a Nomad call that failed; "
            "pass: a pass that raised; read: a pass that could not read Consul or Nomad; "
            "plugin: a third-party filter or scorer that raised in a pass, once per pass).",
            ["kind"],
            registry=r,
        )
        self.actions = Counter(
            "llm_scheduler_actions",
            "Actions carried out, by op and result.",
            ["op", "result"],
            registry=r,
        )
        self._start_metrics(r)
        self._reason_metrics(r)
        self.passes = Counter("llm_scheduler_passes", "Reconcile passes.", registry=r)
        self.passes_carried = Counter(
            "llm_scheduler_passes_carried",
            "Reconcile passes carried over: nothing changed since the last pass, whose view and "
            "plan stood (no read, no decision, no write); counted in llm_scheduler_passes_total "
            "too.",
            registry=r,
        )
        self.last_pass = Gauge(
            "llm_scheduler_last_pass_timestamp_seconds", "When the last pass ended.", registry=r
        )
        self.input_errors = Gauge(
            "llm_scheduler_input_errors",
            "Bad KV values standing in the last pass (each named in status/_errors).",
            registry=r,
        )
        self.leader = Gauge(
            "llm_scheduler_leader", "1 while this instance holds the leader lock.", registry=r
        )
        Info("llm_scheduler_build", "The running build.", registry=r).info(_build_labels())
        for kind in ("input", "start", "stop", "pass", "read", "plugin"):
            self.errors.labels(kind)
        self.backlog = Gauge(
            "llm_scheduler_actuation_backlog",
            "Nomad registers and stops queued or running, not yet done.",
            registry=r,
        )

    def _start_metrics(self, r: CollectorRegistry) -> None:
        """Replicas started, warm or cold, and how long they took to be ready."""
        self.starts = Counter(
            "llm_scheduler_starts",
            "Replicas started, by model and whether the head node's model cache held the "
            "model's revision (warm) or not (cold), as last reported.",
            ["model", "cache"],
            registry=r,
        )
        self.time_to_ready = Histogram(
            "llm_scheduler_time_to_ready_seconds",
            "Start-to-ready time of the replicas started, by model and whether the head node's "
            "model cache held the model's revision when it was started (warm) or not (cold).",
            ["model", "cache"],
            buckets=READY_BUCKETS,
            registry=r,
        )
        self.prefetches = Gauge(
            "llm_scheduler_prefetch_nodes",
            "Nodes per prefetching model (serve.prefetch) whose model cache holds its weights "
            "(cached), where a prefetch job downloads them (running) or failed (failed).",
            ["model", "state"],
            registry=r,
        )
        self._prefetch_known: set[tuple[str, str]] = set()

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None:
        with self._lock:
            self._classes = {m.name: m.class_ for m in snapshot.models}
            for model, warmth, seconds in self._ready.pass_seen(snapshot):
                self.time_to_ready.labels(model, warmth).observe(seconds)
            self.passes.inc()
            self.pass_duration.observe(duration_s)
            self.last_pass.set_to_current_time()
            self.models.set(len(snapshot.models))
            self.models_pending.set(sum(1 for s in plan.models.values() if s.pending))
            by_code: dict[str, int] = {}
            for s in plan.models.values():
                if s.pending_code is not None:
                    by_code[s.pending_code] = by_code.get(s.pending_code, 0) + 1
            self.pending_by_code.clear()
            for code, n in by_code.items():
                self.pending_by_code.labels(code).set(n)
            self._count_input_errors(input_errors)
            counts: dict[tuple[str, str], int] = {}
            for m in snapshot.models:
                for state in REPLICA_STATES:
                    counts[(m.name, state)] = 0
            for rep in snapshot.replicas:
                counts[(rep.model, rep.state)] = counts.get((rep.model, rep.state), 0) + 1
            # Series of models that left the catalog and have no replicas go away.
            for gone in self._known - counts.keys():
                self.replicas.remove(*gone)
            self._known = set(counts)
            for (model, state), n in counts.items():
                self.replicas.labels(model, state).set(n)
            for gone_model in self._desired_known - plan.models.keys():
                self.desired.remove(gone_model)
            self._desired_known = set(plan.models)
            for name, status in plan.models.items():
                self.desired.labels(name).set(status.desired)
            self._export_signals(snapshot, plan)
            self._export_prefetch(plan)
            use = usage(snapshot)
            self.gpus.labels("allocated").set(use.gpus_allocated)
            self.gpus.labels("free").set(use.gpus_total - use.gpus_allocated)
            self.mig_slices.labels("allocated").set(use.mig_allocated)
            self.mig_slices.labels("free").set(use.mig_total - use.mig_allocated)

    def pass_carried(self, duration_s: float, input_errors: list[str]) -> None:
        """A pass carried over: the gauges stand as the last full pass set them."""
        with self._lock:
            self.passes.inc()
            self.passes_carried.inc()
            self.pass_duration.observe(duration_s)
            self.last_pass.set_to_current_time()
            self._count_input_errors(input_errors)

    def _count_input_errors(self, input_errors: list[str]) -> None:
        """A bad value is counted once, when it appears, not again on each pass it stands."""
        now = set(input_errors)
        new = now - self._standing_errors
        if new:
            self.errors.labels("input").inc(len(new))
        self._standing_errors = now
        self.input_errors.set(len(now))

    def _export_signals(self, snapshot: Snapshot, plan: Plan) -> None:
        values: dict[tuple[str, str], float] = {}
        for name, load in snapshot.load.items():
            for field, (_, _, factor) in SIGNAL_METRICS.items():
                value = getattr(load, field)
                if value is not None:
                    values[(field, name)] = float(value) * factor
        for name, status in plan.models.items():
            if status.recommended is not None:
                values[("recommended", name)] = float(status.recommended)
        for field, name in self._signals_known - values.keys():
            self._signal_gauge(field).remove(name)
        self._signals_known = set(values)
        for (field, name), value in values.items():
            self._signal_gauge(field).labels(name).set(value)

    def _export_prefetch(self, plan: Plan) -> None:
        values: dict[tuple[str, str], int] = {}
        for name, status in plan.prefetch.items():
            for state in ("cached", "running", "failed"):
                values[(name, state)] = len(getattr(status, state))
        for gone in self._prefetch_known - values.keys():
            self.prefetches.remove(*gone)
        self._prefetch_known = set(values)
        for (name, state), n in values.items():
            self.prefetches.labels(name, state).set(n)

    def _signal_gauge(self, field: str) -> Gauge:
        return self.recommended if field == "recommended" else self.signals[field]

    def attach(self, service: Any) -> None:
        """Called by the service it observes: read its backlog and health when asked."""
        backlog = getattr(service, "backlog", None)
        if backlog is not None:
            self.backlog.set_function(lambda: float(backlog()))
        self.health_check = service.health
        leader = getattr(service, "leader", None)
        if leader is not None:
            self.leader.set_function(lambda: float(leader.is_leader))

    def pass_failed(self, kind: str, error: str) -> None:
        with self._lock:
            self.errors.labels(kind).inc()

    def plugin_failed(self, name: str, error: str) -> None:
        with self._lock:
            self.errors.labels("plugin").inc()

    def action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        with self._lock:
            self.actions.labels(action.op, "ok" if ok else "error").inc()
            if ok and isinstance(action, StopAction):
                self.stops.labels(action.code or "unknown").inc()
            if ok and isinstance(action, StartAction):
                self.starts.labels(action.model, self._ready.start_sent(action)).inc()
            if not ok:
                self.errors.labels(action.op).inc()
            elif isinstance(action, StopAction) and action.preempted_for:
                self.preemptions.labels(self._classes.get(action.model, "unknown")).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
