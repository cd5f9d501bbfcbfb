"""Carry out a plan's prefetch starts and stops (rules PF1-PF3) on the actuator's workers.

A start registers the model's prefetch job on its node (JobMaker.make_prefetch, shaped in
scheduler/adapters/prefetch_jobs.py); a stop deregisters and purges it: Nomad stops its
allocation, and no dead job is left to read as a finished download. Until a listing asked for
after a call returned can show its effect, the call is overlaid on the next snapshots, so no
pass starts or stops the same prefetch twice. A call that failed is reported per model (its
status record's `prefetch.last_error`); a download that failed shows in the snapshot itself
(the job's allocation failed). Logs name the job, model and node, never the job's body (the
model's environment may hold a token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import structlog

from scheduler.adapters.job_maker import JobMaker, ModelUnservable
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_jobs import JobShapeError
from scheduler.adapters.prefetch_jobs import prefetch_job_id
from scheduler.core.models import Model, Node, Snapshot
from scheduler.core.prefetch import PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB
from scheduler.core.prefetch_records import Prefetch, PrefetchAction
from scheduler.service.unservable import Unservable

log = structlog.get_logger("llm-scheduler.act")

Submit = Callable[[Callable[[], None]], object]


@dataclass
class _InFlight:
    action: PrefetchAction
    source: str
    revision: str | None
    done_at: float | None = None  # time.monotonic() when the call returned


class Prefetcher:
    def __init__(
        self, nomad: NomadAPI, jobs: JobMaker, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.nomad = nomad
        self.jobs = jobs
        self.clock = clock
        # A model whose prefetch job cannot be made (template, serve) is retried with backoff.
        self.unservable = Unservable()
        self._lock = threading.Lock()
        self._pending: dict[str, _InFlight] = {}  # job id -> its call
        self.errors: dict[str, str] = {}  # model -> its last prefetch call's error

    def overlay(self, snapshot: Snapshot, read_started: float) -> Snapshot:
        """`snapshot` with the prefetch calls in flight (or finished after its read began):
        a start as a running prefetch, a stop as gone."""
        with self._lock:
            for jid, call in list(self._pending.items()):
                if call.done_at is not None and call.done_at < read_started:
                    del self._pending[jid]  # the read saw its effect
            pending = dict(self._pending)
        if not pending:
            return snapshot
        kept = [p for p in snapshot.prefetches if p.id not in pending]
        started = [
            Prefetch(
                id=jid,
                model=call.action.model,
                node=call.action.node,
                source=call.source,
                revision=call.revision,
                cpu_cores=PREFETCH_CPU_CORES,
                memory_gb=PREFETCH_MEMORY_GB,
            )
            for jid, call in sorted(pending.items())
            if call.action.op == "start"
        ]
        return snapshot.model_copy(update={"prefetches": kept + started})

    def busy(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def act(
        self,
        actions: list[PrefetchAction],
        models: dict[str, Model],
        nodes: dict[str, Node],
        now: datetime,
        submit: Submit,
    ) -> None:
        """Queue the plan's prefetch calls on `submit` (the actuator's workers)."""
        for action in actions:
            model = models.get(action.model)
            jid = action.id or prefetch_job_id(action.model, action.node)
            serve = model.serve if model is not None else None
            if action.op == "start" and (
                model is None
                or serve is None
                or action.node not in nodes
                or self.unservable.backing_off(model, self.clock())
            ):
                continue
            with self._lock:
                if jid in self._pending:
                    continue
                self._pending[jid] = _InFlight(
                    action, serve.source if serve else "", serve.revision if serve else None
                )
            submit(partial(self._call, jid, action, model, nodes.get(action.node), now))

    def _call(
        self,
        jid: str,
        action: PrefetchAction,
        model: Model | None,
        node: Node | None,
        now: datetime,
    ) -> None:
        try:
            if action.op == "stop":
                self.nomad.deregister(jid, purge=True)
            elif model is not None and node is not None:
                try:
                    job = self.jobs.make_prefetch(model, node, now)
                except ModelUnservable as exc:
                    self.unservable.record(model, str(exc), self.clock())
                    raise
                self.nomad.register(job)
            with self._lock:
                self.errors.pop(action.model, None)
            log.info(
                f"prefetch_{action.op}", job=jid, model=action.model, node=action.node,
                reason=action.reason,
            )  # fmt: skip
        except (ModelUnservable, JobShapeError, NomadError) as exc:
            with self._lock:
                self.errors[action.model] = f"prefetch {action.op} on {action.node}: {exc}"
            log.error("prefetch_call_failed", job=jid, model=action.model, error=str(exc))
        finally:
            with self._lock:
                if jid in self._pending:
                    self._pending[jid].done_at = time.monotonic()

    def forget(self, models: set[str]) -> None:
        with self._lock:
            self.errors = {k: v for k, v in self.errors.items() if k in models}
            self.unservable.keep_only(models)
