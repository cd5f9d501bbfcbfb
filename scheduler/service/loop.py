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

from scheduler.adapters.catalog import GENERAL
from scheduler.adapters.consul_kv import CONSUL_ERRORS, ConsulError, make_consul
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.snapshot_builder import (
    ALLOCATIONS,
    JOBS,
    LISTINGS,
    NODES,
    ClusterView,
    Listing,
    Listings,
    ReadFailed,
    SnapshotBuilder,
)
from scheduler.adapters.status_writer import StatusWriter, status_record
from scheduler.core.calm import calm_until
from scheduler.core.decide import decide
from scheduler.core.models import (
    Plan,
    Replica,
    Snapshot,
    StartAction,
    StopAction,
    rfc3339,
    to_json,
)
from scheduler.demand.kv import KVDemandSource
from scheduler.plugins import demand_source, placement_plugins, signal_source, take_failures
from scheduler.service.actuator import Actuator
from scheduler.service.carry import CarryOver, Inputs, Kept, earliest, quiet
from scheduler.service.collector import collector_paused
from scheduler.service.config import ServiceConfig
from scheduler.service.leader import LeaderElection
from scheduler.service.observer import PassObserver
from scheduler.service.watch import Backoff, BlockingWatch

log = structlog.get_logger("llm-scheduler.service")
tracer = trace.get_tracer("llm-scheduler")


class Service:
    def __init__(self, config: ServiceConfig, observers: Sequence[PassObserver] = ()) -> None:
        self.config = config
        self.observers = list(observers)
        self.layout = KVLayout(config.kv_prefix)
        host, port, scheme = config.consul_parts()
        self.consul = make_consul(host, port, scheme, config.consul_token, config.http_keepalive)
        self.nomad = NomadAPI(
            config.nomad_base(),
            token=config.nomad_token,
            namespace=config.nomad_namespace,
            region=config.nomad_region,
            keepalive=config.http_keepalive,
        )
        self.builder = SnapshotBuilder(
            self.nomad,
            self.consul,
            self.layout,
            demand_source=demand_source(config),
            signal_source=signal_source(config),
            max_value_bytes=config.max_value_bytes,
            # A watch answers at least once per wait; an answer older than that is not used.
            listings=Listings(max_age_s=config.http_timeout(config.watch_wait_s)),
        )
        self.actuator = Actuator(
            self.nomad,
            namespace=config.nomad_namespace,
            images={"vllm": config.image_vllm, "sglang": config.image_sglang},
            jobspec_dir=config.jobspec_dir,
            workers=config.actuation_workers,
            on_registered=self.builder.learn,
        )
        self.status = StatusWriter(self.consul, self.layout)
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

    def _watches(self) -> list[BlockingWatch]:
        wait = self.config.watch_wait_s
        margin = self.config.http_margin_s
        from scheduler.adapters.consul_kv import kv_list

        def kv(prefix: str) -> Any:
            return lambda index: kv_list(
                self.consul, prefix, index=index, wait_s=wait, margin_s=margin
            )[0]

        listings = self.builder.listings
        assert listings is not None

        def nomad(name: str) -> Any:
            """Watch one of the snapshot's listings and keep each answer for the next pass."""
            path, params = LISTINGS[name]

            def fetch(index: int) -> int:
                asked = time.monotonic()
                listings.asking(name, asked)
                try:
                    body, new = self.nomad.read(
                        path, params, index=index, wait_s=wait, margin_s=margin
                    )
                except Exception:
                    listings.forget(name)  # the pass reads it, and fails if it cannot
                    raise
                listings.put(name, Listing(body, new, asked, time.monotonic()))
                return new

            return fetch

        def health(index: int) -> int:
            kwargs: dict[str, Any] = {}
            if index > 0:
                kwargs = {"index": index, "wait": f"{int(wait)}s"}
            try:
                idx, _ = self.consul.health.state("any", **kwargs)
            except CONSUL_ERRORS as exc:
                raise ConsulError(str(exc)) from exc
            return int(idx or 0)

        def everything(index: int) -> int:
            """Any key under the prefix, the scheduler's own state and status keys too: the
            carry-over's guard (it wakes no pass). Keys only, folded at the first "/" below the
            prefix: a few names, at the index of the whole prefix (Consul's KVSListKeys in
            agent/consul/state/kvs.go takes the highest ModifyIndex of every key under the
            prefix, folded or not, or the prefix's tombstones')."""
            kwargs: dict[str, Any] = {"keys": True, "separator": "/"}
            if index > 0:
                kwargs.update(index=index, wait=f"{int(wait)}s")
            try:
                idx, _ = self.consul.kv.get(self.layout.prefix, **kwargs)
            except CONSUL_ERRORS as exc:
                raise ConsulError(str(exc)) from exc
            return int(idx or 0)

        sources: dict[str, Any] = {
            "models": kv(self.layout.models),
            "quotas": kv(self.layout.quotas),
            "demand": kv(self.layout.demand),
            "settings": kv(self.layout.settings),
            "gpu-reports": kv(self.layout.nodes),
            NODES: nomad(NODES),
            ALLOCATIONS: nomad(ALLOCATIONS),
            JOBS: nomad(JOBS),
            "consul-health": health,
        }
        watches = [
            BlockingWatch(name, fetch, self.trigger, self._stop, self._backoff())
            for name, fetch in sources.items()
        ]
        watches.append(BlockingWatch(KV_ALL, everything, _nothing, self._stop, self._backoff()))
        return watches

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
        now = time.monotonic()
        reasons: list[str] = []
        if self.failures_in_a_row >= self.config.unhealthy_after_failures:
            reasons.append(f"{self.failures_in_a_row} passes in a row failed: {self.last_failure}")
        stale_after = 2 * self.config.http_timeout(self.config.watch_wait_s)
        for watch in self.watches:
            stale = watch.stale_for(now)
            if stale > stale_after:
                reasons.append(f"watch {watch.name} stale for {stale:.0f} s: {watch.last_error}")
        quiet = now - self._last_pass_end
        if self._running and quiet > 3 * self.config.pass_interval_s + stale_after:
            reasons.append(f"no pass finished for {quiet:.0f} s")
        return {
            "ok": not reasons,
            "reasons": reasons,
            "leader": self.leader.is_leader,
            "passes": self.passes,
            "failed_passes": self.pass_failures,
            "failures_in_a_row": self.failures_in_a_row,
            # Not a reason to restart the scheduler (a plugin's bug stays); reported as it is.
            "plugins_failing": self.plugins_failing,
            "last_pass_age_s": round(quiet, 3),
        }

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
            if leader and view.from_watches and _destructive(view, plan):
                # A watch's answer is complete, but says nothing of whether Nomad can still be
                # read: stops (and replicas Nomad failed) wait for listings read now, which
                # fail the pass when Nomad cannot be read. What the plan starts independently
                # of its stops goes out first, so that new demand does not wait for that read.
                span.set_attribute("reread", True)
                reread = True
                first = replace(view, faults={}, purgeable=[])
                self.actuator.act(first, _independent_starts(view, plan), self._action_done)
                decided = self._decide(time.monotonic(), span)
                if decided is None:
                    return None
                view, plan = decided
            span.set_attribute("actions", len(plan.actions))
            if leader:
                self.status.prime(view.kv_entries)
                self.actuator.act(view, plan, self._action_done)
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

    # ------------------------------------------------------------------ carry-over (issue 15)

    def _inputs(self) -> Inputs | None:
        """What the next view rests on besides the listings, or None when some of it cannot
        be vouched for: no watches (one-shot use), a watch failing or stale, the actuator busy."""
        mark = self.actuator.quiet_mark()
        if not self.watches or mark is None:
            return None
        now = time.monotonic()
        max_age = self.config.http_timeout(self.config.watch_wait_s)
        if any(w.last_error is not None or now - w.last_ok > max_age for w in self.watches):
            return None
        return Inputs(
            watches=tuple((w.name, w.version) for w in self.watches),
            leader=(self.leader.is_leader, self._leader_changes),
            actuator=mark,
        )

    def _keep(self, view: ClusterView, plan: Plan, inputs: Inputs) -> None:
        """Keep a quiet pass for the next ones, until the clock could change its plan."""
        builder = self.builder
        if (
            not quiet(view, plan)
            or builder.signal_source is not None  # read each pass: unknown until read
            or not isinstance(builder.demand_source, KVDemandSource)
        ):
            return
        until = earliest(calm_until(view.snapshot, plan), builder.expires(view.snapshot))
        self.carry.keep(Kept(view, plan, inputs, until))

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
        view.snapshot = self.actuator.overlay(view.snapshot, read_at, view.jobs_index)
        self.actuator.remember_preempted(view.preempted)
        with tracer.start_as_current_span("decide"), collector_paused():
            plan = decide(view.snapshot, self.plugins)
        self._count_plugin_failures()
        self.builder.remember(view.snapshot, plan)  # for the scale-down window (issue 18)
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
        stamp = rfc3339(view.snapshot.now)
        names = {m.name for m in view.snapshot.models} | set(plan.models)
        names |= {t for t in view.catalog.errors if t != GENERAL}
        names |= {r.model for r in view.snapshot.replicas}
        # The state the next pass reads first: whoever sees a status of this pass (a stopped
        # roll-out, a move) finds the state that goes with it.
        live = {r.id for r in view.snapshot.replicas}
        self.actuator.forget(live, names)
        state = {
            "holds": {k: v.model_dump(by_alias=True, mode="json") for k, v in plan.holds.items()},
            "preempted": self.actuator.preempted,
            "stalled": dict(plan.stalled),  # failed roll-outs (issue 16)
            "moves": dict(plan.moves),  # replicas being moved -> their replacements
            "gone": view.gone.to_json(),
        }
        self.status.write(self.layout.holds, state, stamp)
        by_model: dict[str, list[Replica]] = {}
        for rep in view.snapshot.replicas:
            by_model.setdefault(rep.model, []).append(rep)
        records = []
        for name in sorted(names):
            errors = view.catalog.errors.get(name, [])
            action_error = self.actuator.errors.get(name)
            last_error = "; ".join([*errors, *([action_error] if action_error else [])]) or None
            record = status_record(plan.models.get(name), by_model.get(name, []), last_error)
            records.append((self.layout.status_key(name), record))
        self.status.write_many(records, stamp)
        general = view.catalog.errors.get(GENERAL, []) + view.warnings
        self.status.write(
            self.layout.status_errors,
            {
                "errors": general,
                "last_error": general[-1] if general else None,
                "advice": list(plan.advice),
            },
            stamp,
        )
        # A model with no key, no error and nothing left running: its record goes too.
        for entry in view.kv_entries:
            key = str(entry.get("Key", ""))
            if not key.startswith(self.layout.status) or key == self.layout.status_errors:
                continue
            name = key[len(self.layout.status) :]
            if name not in names and self.status.delete(key):
                log.info("status_removed", model=name, reason="retired: nothing of it is left")

    def snapshot_json(self) -> str:
        view = self.builder.build(datetime.now(UTC))
        return to_json(view.snapshot)


KV_ALL = "consul-kv"  # the watch of the whole KV prefix (the carry-over's guard)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _nothing() -> None:
    """A watch that wakes no pass."""


def _destructive(view: ClusterView, plan: Plan) -> bool:
    """The plan stops a replica, or Nomad failed one (which the actuator stops)."""
    return bool(view.faults) or any(isinstance(a, StopAction) for a in plan.actions)


def _independent_starts(view: ClusterView, plan: Plan) -> Plan:
    """The plan's starts that owe nothing to its stops: none of the same model (a roll-out's
    surge, a move) and none on a node a stop frees (preemption, room made). The others go out
    with their stops, after them, as the actuator queues a plan."""
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    shards = {r.id: r.shards for r in view.snapshot.replicas}
    models = {a.model for a in stops}
    nodes = {s.node for a in stops for s in shards.get(a.replica, [])}
    nodes |= {s.node for r in view.faults for s in shards.get(r, [])}
    starts = [
        a
        for a in plan.actions
        if isinstance(a, StartAction)
        and a.model not in models
        and not any(s.node in nodes for s in a.shards)
    ]
    return plan.model_copy(update={"actions": starts})
