"""Carry out a plan against Nomad: register starts, deregister stops, purge what is gone.

Only jobs the snapshot builder recognised as ours (Meta llm_scheduler_model) are stopped.
A start is skipped when its job already exists and is not stopped, so a restarted scheduler
never registers a replica twice.

Actions run on a bounded pool of workers, so a slow Nomad never holds back the next pass's
decisions. What is queued or running is remembered per replica until a snapshot read after
it finished shows its effect; until then `overlay()` puts it into the next snapshot (a start
as a `starting` replica on its devices, a stop as `stopping`), so no pass registers or stops
the same thing twice, nor gives its devices to someone else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from functools import partial
from typing import Any

import structlog
from opentelemetry import trace

from scheduler.adapters.job_maker import JobMaker, ModelUnservable
from scheduler.adapters.model_cache_mount import DEFAULT_VOLUME
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_jobs import JobShapeError, job_id, owned_job
from scheduler.core.models import Model, Snapshot, StartAction, StopAction
from scheduler.service.in_flight import Pending, Written, overlaid
from scheduler.service.prefetcher import Prefetcher
from scheduler.service.unservable import Unservable
from scheduler.service.work import Facts, Work

log = structlog.get_logger("llm-scheduler.act")
tracer = trace.get_tracer("llm-scheduler")

FAILED_MARK = "replica"  # errors that report a failed replica, not a failed call
ActionHook = Callable[[StartAction | StopAction, bool, str | None], None]


class Actuator:
    def __init__(
        self,
        nomad: NomadAPI,
        *,
        namespace: str | None,
        images: dict[str, str],
        jobspec_dir: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        workers: int = 8,
        on_registered: Callable[[dict[str, Any], int], None] | None = None,
        model_cache_volume: str = DEFAULT_VOLUME,
    ) -> None:
        self.nomad = nomad
        # Told each job registered and the JobModifyIndex Nomad gave it (the snapshot builder,
        # which then need not read it back).
        self.on_registered = on_registered
        self.namespace = namespace
        self.jobs = JobMaker(
            nomad,
            namespace=namespace,
            images=images,
            jobspec_dir=jobspec_dir,
            model_cache_volume=model_cache_volume,
        )
        self.prefetcher = Prefetcher(nomad, self.jobs)  # the plan's prefetch jobs
        self.clock = clock
        self.unservable = Unservable()
        self.preempted: dict[str, str] = {}  # replica -> the model it was stopped for
        self.errors: dict[str, str] = {}  # model -> its last action error
        # workers=0: every action inline, in the pass (one-shot commands).
        self._pool = ThreadPoolExecutor(workers, "act") if workers > 0 else None
        self._lock = threading.Lock()
        self._pending: dict[str, Pending] = {}  # replica id -> its action
        self._purging: set[str] = set()
        self._futures: set[Future[None]] = set()
        self._finished = 0  # work items done so far (actions and purges)

    # ------------------------------------------------------------------ in flight

    def backlog(self) -> int:
        """Actions queued or running (the llm_scheduler_actuation_backlog gauge)."""
        with self._lock:
            return sum(1 for p in self._pending.values() if p.done_at is None)

    def overlay(self, snapshot: Snapshot, read_started: float, nomad_index: int = 0) -> Snapshot:
        """`snapshot` with what is in flight (or finished after its read began) applied.

        A finished action's effect shows in a job listing asked for after it returned, or in
        one whose X-Nomad-Index (`nomad_index`) reached the index its write was made at.
        """
        with self._lock:
            for rid, p in list(self._pending.items()):
                if p.done_at is None:
                    continue
                shown = p.index is not None and nomad_index > 0 and p.index <= nomad_index
                if shown or p.done_at < read_started:
                    del self._pending[rid]  # the read saw its effect
            pending = {rid: p.action for rid, p in self._pending.items()}
        return self.prefetcher.overlay(overlaid(snapshot, pending), read_started)

    def quiet_mark(self) -> int | None:
        """How many work items have finished, or None while any is queued, running, or done
        but not yet seen by a read (the overlay would change): equal marks of two moments
        mean the actuator did nothing in between (a pass may be carried over, carry.py)."""
        with self._lock:
            if self._pending or self._futures or self._purging or self.prefetcher.busy():
                return None
            return self._finished

    def unsettled_since(self) -> float:
        """When the latest failed call returned (0.0: none waits): Nomad may or may not have
        applied it, so only a listing asked for after that can say (see Listings)."""
        with self._lock:
            return max(
                (p.done_at for p in self._pending.values() if p.done_at and p.index is None),
                default=0.0,
            )

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for every queued action; True when none is left."""
        with self._lock:
            futures = list(self._futures)
        _, not_done = wait(futures, timeout=timeout)
        return not not_done

    def shutdown(self, timeout: float = 30.0) -> None:
        """Finish what is queued (a new leader must see it in Nomad), then stop the workers."""
        self.drain(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, key: str | None, work: Callable[[], Written]) -> Future[None] | None:
        def run() -> None:
            written: Written = None
            try:
                written = work()
            except Exception:  # a worker must never die silently
                log.exception("action_crashed", replica=key)
            finally:
                with self._lock:
                    self._finished += 1
                    if key is not None and key in self._pending:
                        self._pending[key].index = written
                        self._pending[key].done_at = time.monotonic()

        if self._pool is None:
            run()
            return None
        future = self._pool.submit(run)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._discard)
        return future

    def _discard(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _claim(self, action: StartAction | StopAction) -> bool:
        """Mark the replica as in flight; False when it already is (a pass came too soon)."""
        with self._lock:
            if action.replica in self._pending:
                return False
            self._pending[action.replica] = Pending(action)
            return True

    def forget(self, live_replicas: set[str], models: set[str]) -> None:
        """Per-replica and per-model memory shrinks with the cluster (replicas and models that
        are gone), so a long-running scheduler does not grow without bound."""
        with self._lock:
            self.preempted = {k: v for k, v in self.preempted.items() if k in live_replicas}
            self.errors = {k: v for k, v in self.errors.items() if k in models}
        self.prefetcher.forget(models)

    def remember_preempted(self, marks: dict[str, str]) -> None:
        """Merge the preempted-for marks read back from KV (a restart's memory)."""
        with self._lock:
            self.preempted = {**marks, **self.preempted}

    def act(self, work: Work, hook: ActionHook) -> None:
        """Queue the work's actions (stops first) and return; workers carry them out."""
        facts = work.facts
        self.unservable.keep_only(set(facts.models))
        self._fail(work, hook)
        # A model's starts wait for its stops of the same plan (a rolling update stops the
        # replica a replacement covers and starts the next one in one pass): Nomad never holds
        # more of its jobs than the desired count and the surge. The stops are queued first,
        # so a start waiting on a worker never waits for one queued behind it.
        stopping: dict[str, list[Future[None]]] = {}
        for action in work.actions:
            if not self._claim(action):
                continue
            if isinstance(action, StopAction):
                stop = self._submit(action.replica, partial(self._stop, facts, action, hook))
                if stop is not None:
                    stopping.setdefault(action.model, []).append(stop)
            else:
                start = partial(self._start, facts, action, hook)
                first = stopping.get(action.model)
                self._submit(action.replica, partial(_after, first, start) if first else start)
        self.prefetcher.act(
            work.prefetches, facts.models, facts.nodes, facts.now,
            lambda call: self._submit(None, partial(_none, call)),
        )  # fmt: skip
        for jid in work.purge:
            with self._lock:
                if jid in self._purging:
                    continue
                self._purging.add(jid)
            self._submit(None, partial(self._purge, jid))

    def _purge(self, jid: str) -> Written:
        try:
            with tracer.start_as_current_span("nomad.deregister", attributes={"job": jid}):
                self.nomad.deregister(jid, purge=True)
            log.info("purged", job=jid, reason="stopped and no allocation left")
        except NomadError as exc:
            log.warning("purge_failed", job=jid, error=str(exc))
        finally:
            with self._lock:
                self._purging.discard(jid)
        return None

    def _fail(self, work: Work, hook: ActionHook) -> None:
        """Stop the replicas Nomad failed (placement refused, devices short) and say why in
        the model's status; the refused spot is kept out of placements by the builder."""
        for replica, why in work.failed.items():
            job = work.facts.jobs[replica]
            log.error("replica_failed", job=job.job_id, model=job.model, reason=why)
            self._stop(work.facts, StopAction(replica=replica, model=job.model, reason=why), hook)
            self.errors[job.model] = f"{FAILED_MARK} {replica} failed: {why}"

    def _stop(self, facts: Facts, action: StopAction, hook: ActionHook) -> Written:
        job = facts.jobs.get(action.replica)
        if job is None or job.model != action.model:
            log.warning("stop_skipped", replica=action.replica, reason="no job of ours")
            return 0
        attrs = {"model": action.model, "replica": action.replica}
        span_name = "preempt" if action.preempted_for else "stop"
        if action.preempted_for:
            attrs["victims"] = action.replica
            attrs["for"] = action.preempted_for
        with tracer.start_as_current_span(span_name, attributes=attrs):
            try:
                with tracer.start_as_current_span(
                    "nomad.deregister", attributes={"job": job.job_id}
                ):
                    answer = self.nomad.deregister(job.job_id, purge=False)
            except NomadError as exc:
                with self._lock:
                    self.errors[action.model] = f"stop {action.replica}: {exc}"
                log.error("stop_failed", job=job.job_id, error=str(exc))
                hook(action, False, str(exc))
                return None
        with self._lock:
            if action.preempted_for:
                self.preempted[action.replica] = action.preempted_for
            if self.errors.get(action.model, "").startswith("stop "):
                del self.errors[action.model]  # Nomad takes stops again: the error is stale
        log.info("stopped", job=job.job_id, model=action.model, reason=action.reason)
        hook(action, True, None)
        return _write_index(answer)

    def _start(self, facts: Facts, action: StartAction, hook: ActionHook) -> Written:
        model = facts.models.get(action.model)
        jid = job_id(action.model, action.replica)
        if model is None:
            return 0
        if self.unservable.backing_off(model, self.clock()):
            return 0  # its error stands in its status; retried when the backoff ends
        if action.replica in facts.jobs:
            log.info("start_skipped", job=jid, reason="replica already has a job")
            return 0
        with tracer.start_as_current_span("place", attributes=_place_attributes(model, action)):
            try:
                # Listed ids come from this pass's read; a job registered since by another
                # scheduler is excluded by the leader lock.
                existing = self.nomad.job_or_none(jid) if jid in facts.listed else None
                mine = owned_job(existing) if existing else None
                if existing and (mine is None or not mine.stopped):
                    log.info("start_skipped", job=jid, reason="job already registered")
                    return 0
                job = self.jobs.make(model, action, facts.nodes, facts.now)
                with tracer.start_as_current_span("nomad.register", attributes={"job": jid}):
                    answer = self.nomad.register(job)
            except ModelUnservable as exc:
                self.unservable.record(model, str(exc), self.clock())
                self.errors[model.name] = str(exc)
                hook(action, False, str(exc))
                return 0
            except (JobShapeError, NomadError) as exc:
                with self._lock:
                    self.errors[action.model] = f"start {action.replica}: {exc}"
                log.error("start_failed", job=jid, model=action.model, error=str(exc))
                hook(action, False, str(exc))
                # A failed Nomad call may have been applied; a job that cannot be written not.
                return None if isinstance(exc, NomadError) else 0
        return self._started(jid, job, action, _write_index(answer), hook, facts.nodes)

    def _started(
        self,
        jid: str,
        job: dict[str, Any],
        action: StartAction,
        written: Written,
        hook: ActionHook,
        nodes: dict[str, Any],
    ) -> Written:
        if written and self.on_registered is not None:
            self.on_registered(job, written)
        with self._lock:
            if not self.errors.get(action.model, "").startswith(FAILED_MARK):
                self.errors.pop(action.model, None)  # a failed replica stays reported
            self.unservable.healed(action.model)
        log.info(
            "started",
            job=jid,
            model=action.model,
            profile=action.profile,
            # Each node's name beside its id, for an operator to read.
            shards=[
                {**s.model_dump(), "node_name": n.name if (n := nodes.get(s.node)) else None}
                for s in action.shards
            ],
            reason=action.reason,
        )
        hook(action, True, None)
        return written


def _place_attributes(model: Model, action: StartAction) -> dict[str, Any]:
    profile = model.profile(action.profile)
    return {
        "model": action.model,
        "class": model.class_,
        "replica": action.replica,
        "profile": action.profile,
        "gpus": sum(len(s.gpus) for s in action.shards),
        "mig": bool(profile and profile.is_mig),
    }


def _write_index(answer: Any) -> Written:
    """The JobModifyIndex of a register's or deregister's answer (None when it has none)."""
    try:
        index = int((answer or {}).get("JobModifyIndex") or 0)
    except (TypeError, ValueError, AttributeError):
        return None
    return index or None


def now_utc() -> datetime:
    from datetime import UTC

    return datetime.now(UTC)


def _none(call: Callable[[], None]) -> Written:
    call()
    return None


def _after(first: list[Future[None]], work: Callable[[], Written]) -> Written:
    wait(first)
    return work()
