"""The service loop: watch, snapshot, decide, act (leader only), record.

service = Service(ServiceConfig(), observers=[metrics])
thread = service.run_in_thread()
...
service.stop()

Safety rules (what the service does when its inputs are bad or missing):
- Nomad, Consul or the demand source unreadable: the pass ends before deciding; no start,
  no stop, no status write, until a full read succeeds (ReadFailed).
- Nomad's listings come from the watches' latest answers (whole listings, current as of their
  index; a failed watch forgets its answer). A pass that would stop anything reads them again
  first and acts on those, so no stop rests on a read Nomad did not answer just now.
- A model whose KV value (or demand value) turns invalid is "frozen": the last good value this
  process saw stands in for it, its replicas are never stopped, and the error goes to its
  status key. After a restart with no good value seen, its replicas are still kept.
  Deleting the key (not breaking it) is how an operator retires a model.
- A quota that turns invalid keeps its last good value; with none, no model under that
  owner path is started. Bad settings keep the last good settings (defaults at first).
- Only jobs with Meta llm_scheduler_model are ever stopped or purged.
- A quiet pass (nothing changed since the last, which acted on nothing) is carried over: the
  last view and plan stand, nothing is read, decided or written (carry.py says when).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import structlog
from opentelemetry import trace

from scheduler.adapters.consul_kv import ConsulError
from scheduler.adapters.snapshot_builder import (
    ClusterView,
    ReadFailed,
)
from scheduler.core.decide import decide
from scheduler.core.models import (
    Plan,
    Snapshot,
    StartAction,
    StopAction,
    to_json,
)
from scheduler.plugins import placement_plugins, take_failures
from scheduler.service.carry import CarryOver, Inputs, Kept, kept_if_quiet, watched_inputs
from scheduler.service.collector import collector_paused
from scheduler.service.config import ServiceConfig
from scheduler.service.connect import connect
from scheduler.service.fresh_reads import destructive, independent_starts
from scheduler.service.health import health_report
from scheduler.service.leader import LeaderElection
from scheduler.service.observer import PassObserver
from scheduler.service.ready_learning import ReadyLearning
from scheduler.service.status_report import status_input, status_names, write_status
from scheduler.service.watch import Backoff, BlockingWatch
from scheduler.service.watches import make_watches
from scheduler.service.work import work_of

log = structlog.get_logger("llm-scheduler.service")
tracer = trace.get_tracer("llm-scheduler")


class Service:
    def __init__(self, config: ServiceConfig, observers: Sequence[PassObserver] = ()) -> None:
        self.config = config
        self.ready = ReadyLearning()  # start-to-ready times, learned and kept in KV
        self.observers = [self.ready, *observers]  # first: the others read what it learned
        parts = connect(config)
        self.layout, self.consul, self.nomad = parts.layout, parts.consul, parts.nomad
        self.builder, self.actuator, self.status = parts.builder, parts.actuator, parts.status
        self.plugins = placement_plugins()
        # Third-party filters and scorers that raised in the last pass, with the error.
        self.plugins_failing: list[str] = []
        self._stop = threading.Event()
        self._changed = threading.Event()
        self.leader = LeaderElection(
            self.consul,
            self.layout.leader,
            ttl_s=config.session_ttl_s,
            lock_delay_s=config.lock_delay_s,
            on_change=self._leadership,
            backoff=self._backoff(),
        )
        self._thread: threading.Thread | None = None
        self.watches: list[BlockingWatch] = []
        self._running = False
        self.last_plan: Plan | None = None
        self.last_read_error: str | None = None
        self.passes = 0
        self._logged_errors: list[str] = []
        # Health: passes that raised, reads that failed, and the watches' own state.
        self.pass_failures = 0
        self.failures_in_a_row = 0
        self.last_failure: str | None = None
        self._last_pass_end = time.monotonic()
        self.carry = CarryOver()
        self.clock: Callable[[], datetime] = _utcnow  # a pass's `now` (tests move it)
        self._leader_changes = 0
        for obs in self.observers:
            attach = getattr(obs, "attach", None)
            if attach is not None:
                attach(self)

    # ------------------------------------------------------------------ lifecycle

    def _backoff(self) -> Backoff:
        return Backoff(self.config.backoff_min_s, self.config.backoff_max_s)

    def _leadership(self, leader: bool) -> None:
        self._leader_changes += 1  # before forgetting: no pass may carry the old state over
        self.status.forget()
        self.trigger()

    def trigger(self) -> None:
        self._changed.set()

    def run(self) -> None:
        self._running = True
        self.leader.start()
        self.watches = self._watches()
        for watch in self.watches:
            watch.start()
        try:
            self._loop()
        finally:
            # What is queued still goes out before the lock is released: a new leader must
            # find it in Nomad, or it would register the same replicas again.
            self.actuator.shutdown(self.config.shutdown_drain_s)
            self.leader.stop()
            self._running = False
            if self._thread is None:
                self.nomad.close()

    def _watches(self) -> list[BlockingWatch]:
        listings = self.builder.listings
        assert listings is not None
        return make_watches(
            self.config,
            self.consul,
            self.nomad,
            self.layout,
            listings,
            self.trigger,
            self._stop,
            self._backoff,
        )

    def backlog(self) -> int:
        return self.actuator.backlog()

    def run_in_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="llm-scheduler", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.config.shutdown_drain_s + 15)
        elif self._running:
            return  # run() is below us on this thread (a signal handler): it hands over
        else:
            self.leader.stop()
        self.nomad.close()

    def join_watches(self, timeout_s: float | None = None) -> bool:
        """After stop(): wait until every watch's open blocking query has returned (each ends
        within its wait). For embedders that stop the servers next, so that no request is cut
        off mid-query (the demo). True when all have ended."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 1e9)
        for watch in self.watches:
            watch.thread.join(max(0.0, deadline - time.monotonic()))
        return not any(w.thread.is_alive() for w in self.watches)

    # ------------------------------------------------------------------ watches

    # ------------------------------------------------------------------ passes

    def _loop(self) -> None:
        while not self._stop.is_set():
            woke = self._changed.wait(timeout=self._interval())
            if self._stop.is_set():
                break
            if woke and self.config.debounce_s:
                self._stop.wait(self.config.debounce_s)  # let a burst of changes settle
            self._changed.clear()
            self.run_pass_safely()

    def run_pass_safely(self) -> Plan | None:
        """One pass; whatever it raises is counted, logged whole, and shows in /healthz."""
        try:
            plan = self.run_pass()
        except Exception as exc:  # one broken pass must not end the service
            self._failed("pass", f"{type(exc).__name__}: {exc}")
            log.exception("pass_failed", error=self.last_failure, in_a_row=self.failures_in_a_row)
            return None
        if plan is None:
            self._failed("read", f"read failed: {self.last_read_error}")
        else:
            self.failures_in_a_row = 0
        return plan

    def _failed(self, kind: str, error: str) -> None:
        self._last_pass_end = time.monotonic()
        self.failures_in_a_row += 1
        self.last_failure = error
        if kind == "pass":
            self.pass_failures += 1
        self._notify("pass_failed", kind, error)

    def _notify(self, hook_name: str, *args: Any) -> None:
        """Call the observers that have this optional hook."""
        for obs in self.observers:
            hook = getattr(obs, hook_name, None)
            if hook is not None:
                hook(*args)

    def health(self) -> dict[str, Any]:
        """What /healthz answers: ok, the reasons it is not, and whether this instance leads."""
        return health_report(self)

    def _interval(self) -> float:
        if self.builder.signal_source is None:
            return self.config.pass_interval_s
        return min(self.config.pass_interval_s, self.config.signal_interval_s)

    def run_pass(self) -> Plan | None:
        started = time.perf_counter()
        inputs = self._inputs()  # before anything is read: what the view will rest on
        now = self.clock()
        kept = self.carry.reuse(inputs, now)
        if kept is not None:
            return self._carried_pass(kept, now, started)
        self.carry.keep(None)
        recorded, reread = True, False
        with tracer.start_as_current_span("pass") as span:
            # A call that failed may have been applied: only a listing asked for since can
            # say, so a watch's older answer is not used then.
            decided = self._decide(self.actuator.unsettled_since(), span)
            if decided is None:
                return None
            view, plan = decided
            leader = self.leader.is_leader
            span.set_attribute("leader", leader)
            if leader and view.from_watches and destructive(view, plan):
                # A watch's answer is complete, but says nothing of whether Nomad can still be
                # read: stops (and replicas Nomad failed) wait for listings read now, which
                # fail the pass when Nomad cannot be read. What the plan starts independently
                # of its stops goes out first, so that new demand does not wait for that read.
                span.set_attribute("reread", True)
                reread = True
                first = work_of(view, independent_starts(view, plan))
                self.actuator.act(
                    replace(first, failed={}, purge=[], prefetches=[]), self._action_done
                )
                decided = self._decide(time.monotonic(), span)
                if decided is None:
                    return None
                view, plan = decided
            span.set_attribute("actions", len(plan.actions))
            if leader:
                self.status.prime(view.own_entries)
                self.actuator.act(work_of(view, plan), self._action_done)
                try:
                    self._record(view, plan)
                except ConsulError as exc:
                    recorded = False
                    log.warning("status_write_failed", error=str(exc))
        self.last_plan = plan
        self.passes += 1
        self._last_pass_end = time.monotonic()
        duration = time.perf_counter() - started
        for obs in self.observers:
            obs.pass_finished(view.snapshot, plan, duration, view.input_errors)
        if inputs is not None and recorded and not reread:
            self._keep(view, plan, inputs)
        return plan

    # ------------------------------------------------------------------ carry-over

    def _inputs(self) -> Inputs | None:
        """What the next view rests on besides the listings (see carry.watched_inputs)."""
        return watched_inputs(
            self.watches,
            self.config.http_timeout(self.config.watch_wait_s),
            (self.leader.is_leader, self._leader_changes),
            self.actuator.quiet_mark(),
        )

    def _keep(self, view: ClusterView, plan: Plan, inputs: Inputs) -> None:
        """Keep a quiet pass for the next ones, until the clock could change its plan."""
        kept = kept_if_quiet(view, plan, inputs, self.builder)
        if kept is not None:
            self.carry.keep(kept)

    def _carried_pass(self, kept: Kept, now: datetime, started: float) -> Plan:
        """The kept view and plan stand for this pass: nothing to read, decide, act on or
        write (the status writer would find every record unchanged). What still happens: the
        scale-down marks (recorded lazily), the pass count, /healthz's clock, the observers."""
        with tracer.start_as_current_span("pass") as span:
            span.set_attribute("carried", True)
            self.builder.remember_carried(kept.view.snapshot, kept.plan, now)
        self.last_plan = kept.plan
        self.passes += 1
        self._last_pass_end = time.monotonic()
        duration = time.perf_counter() - started
        errors = kept.view.input_errors
        moved: Snapshot | None = None
        for obs in self.observers:
            hook = getattr(obs, "pass_carried", None)
            if hook is not None:
                hook(duration, errors)
                continue
            if moved is None:  # an observer without the hook sees the pass at its own time
                moved = kept.view.snapshot.model_copy(update={"now": now})
            obs.pass_finished(moved, kept.plan, duration, errors)
        return kept.plan

    def _decide(self, asked_after: float, span: Any) -> tuple[ClusterView, Plan] | None:
        """Snapshot (watches' listings asked for after `asked_after`, else reads) and plan;
        None when something could not be read."""
        now = self.clock()
        read_started = time.monotonic()
        try:
            with tracer.start_as_current_span("snapshot"):
                view = self.builder.build(now, asked_after)
        except ReadFailed as exc:
            if str(exc) != self.last_read_error:
                log.error("read_failed", error=str(exc), action="nothing this pass")
            self.last_read_error = str(exc)
            span.set_attribute("read_failed", True)
            return None
        self.last_read_error = None
        # Registers and stops still in flight count as starting and stopping replicas.
        read_at = min(read_started, view.jobs_asked_at)
        overlaid = self.actuator.overlay(view.snapshot, read_at, view.jobs_index)
        view = replace(view, snapshot=overlaid)
        self.actuator.remember_preempted(view.preempted)
        with tracer.start_as_current_span("decide"), collector_paused():
            plan = decide(view.snapshot, self.plugins)
        self._count_plugin_failures()
        self.builder.remember(view.snapshot, plan)  # for the scale-down window
        self._log_input_errors(view)
        return view, plan

    def _count_plugin_failures(self) -> None:
        """A plugin that raised refused its node (or scored it 0) and the pass went on; each
        that did in this pass is counted once (errors{kind="plugin"}) and named in /healthz."""
        failed = take_failures(self.plugins)
        self.plugins_failing = [f"{n}: {err}" for n, err in sorted(failed.items())]
        for name, err in failed.items():
            self._notify("plugin_failed", name, err)

    def _action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        for obs in self.observers:
            obs.action_done(action, ok, error)

    def _log_input_errors(self, view: ClusterView) -> None:
        errors = view.input_errors + view.warnings
        if errors != self._logged_errors:
            for line in errors:
                log.warning("bad_input", error=line)
            self._logged_errors = errors

    def _record(self, view: ClusterView, plan: Plan) -> None:
        given = status_input(view, self.layout)
        names = status_names(given, plan)
        self.actuator.forget({r.id for r in given.replicas}, names)
        write_status(
            self.status,
            self.layout,
            given,
            plan,
            names,
            preempted=self.actuator.preempted,
            action_errors=self.actuator.errors,
            prefetch_errors=self.actuator.prefetcher.errors,
        )

    def snapshot_json(self) -> str:
        view = self.builder.build(datetime.now(UTC))
        return to_json(view.snapshot)


def _utcnow() -> datetime:
    return datetime.now(UTC)
