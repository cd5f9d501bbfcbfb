"""The service's memory of start-to-ready times: fed when a started replica turns ready,
kept in one state key (the leader writes it after each pass, a new leader reads it back), and
the expected times per model that status, `why` and the dashboard show.

A PassObserver: the warmth of a start is decided from the caches of the last pass, as the
starts metric decides it.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

from scheduler.adapters.consul_kv import ConsulError, kv_get
from scheduler.adapters.ready_state import read_observed
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction, rfc3339
from scheduler.core.warmth import weight_bytes
from scheduler.ops.time_to_ready import WARMTHS, ReadyEstimates, ReadyTracker

log = structlog.get_logger("llm-scheduler.service")


class ReadyLearning:
    def __init__(self) -> None:
        self.tracker = ReadyTracker()
        self.expected: dict[str, dict[str, Any]] = {}  # model -> what `status` shows
        self._service: Any = None
        self._loaded_as_leader = False
        self._lock = threading.Lock()

    def attach(self, service: Any) -> None:
        self._service = service

    def action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        if ok and isinstance(action, StartAction):
            with self._lock:
                self.tracker.start_sent(action)

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None:
        leader = self._service is not None and self._service.leader.is_leader
        if leader and not self._loaded_as_leader:
            # What the last leader learned (a follower's own count is empty). Unread, it is
            # not written over: the next pass reads it again.
            leader = self._load()
        self._loaded_as_leader = leader
        with self._lock:
            for model, warmth, seconds in self.tracker.pass_seen(snapshot):
                log.info("replica_ready", model=model, cache=warmth, seconds=round(seconds, 1))
            self.expected = expected_times(self.tracker.estimates, snapshot)
            record = {**self.tracker.estimates.to_json(), "expected": self.expected}
        if leader:
            try:
                key = self._service.layout.time_to_ready
                self._service.status.write(key, record, rfc3339(snapshot.now))
            except ConsulError as exc:
                log.warning("time_to_ready_write_failed", error=str(exc))

    def pass_carried(self, duration_s: float, input_errors: list[str]) -> None:
        """Nothing changed since the last pass: no replica turned ready, nothing to write."""

    def _load(self) -> bool:
        """False when the key could not be read."""
        key = self._service.layout.time_to_ready
        try:
            entry = kv_get(self._service.consul, key)
        except ConsulError as exc:
            log.warning("time_to_ready_read_failed", error=str(exc))
            return False
        if entry is None or not entry.get("Value"):
            return True
        # A bad part is left out; the snapshot builder reports it (status _errors, metrics).
        loaded = read_observed(entry["Value"], key, [])
        with self._lock:  # what this instance saw itself since is newer: it stands
            self.tracker.estimates.observed = {**loaded, **self.tracker.estimates.observed}
        return True


def expected_times(estimates: ReadyEstimates, snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """Per model with a serve spec: the expected seconds warm and cold (learned, else from the
    weight size; None when neither is known), the nodes it is warm on, and how many starts each
    estimate learned from."""
    names = {n.id: n.name for n in snapshot.nodes}
    settings = snapshot.settings
    out: dict[str, dict[str, Any]] = {}
    for m in snapshot.models:
        if m.serve is None:
            continue
        size = weight_bytes(m.serve.source, snapshot.nodes, m.serve.weights_gb)
        times = {
            f"{w}_s": estimates.expected_s(
                m.name, w, size, settings.download_gbps, settings.load_gbps
            )
            for w in WARMTHS
        }
        warm_on = sorted(
            names[n.id]
            for n in snapshot.nodes
            if n.cache is not None and n.cache.holds(m.serve.source, m.serve.revision)
        )
        learned = {w: seen.count for w in WARMTHS if (seen := estimates.observed.get((m.name, w)))}
        out[m.name] = {**times, "warm_nodes": warm_on, "learned": learned}
    return out
