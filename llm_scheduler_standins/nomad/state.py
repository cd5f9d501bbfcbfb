"""The stand-in's cluster: nodes, jobs, evaluations and allocations under one Raft-like index.

All mutation happens under one lock. The methods collect effects (Consul registrations,
timers) and apply them before releasing it, so Consul sees them in the order they happened.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.fleet_model import Node
from llm_scheduler_standins.nomad import deployments, gc, views
from llm_scheduler_standins.nomad.allocs import build_alloc, service_instances
from llm_scheduler_standins.nomad.events import EventLog
from llm_scheduler_standins.nomad.fingerprint import DeviceGroup, device_groups
from llm_scheduler_standins.nomad.jobs import JobValidationError, canonicalize, validate
from llm_scheduler_standins.nomad.nodes import MHZ_PER_CORE, NodeRecord, node_full, node_stub
from llm_scheduler_standins.nomad.placement import Metrics, NodeView, claim, place
from llm_scheduler_standins.nomad.watch import ChangeFeed
from llm_scheduler_standins.registry import CheckStatus, ServiceInstance, ServiceRegistry

if TYPE_CHECKING:
    from llm_scheduler_standins.model_server import ModelServers

TERMINAL_CLIENT = {"complete", "failed", "lost"}
ALLOC_NOT_NEEDED = "alloc not needed due to job update"
# Fields the server owns; a register that changes only these is not a new version.
_SERVER_FIELDS = (
    "Status",
    "StatusDescription",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Stable",
    "Stop",
)
TABLES = ("nodes", "jobs", "allocs", "evals", "deployments")
# An allocation's ClientStatus -> its bin in the job summary (state_store.go
# updateSummaryWithAlloc).
_SUMMARY_BINS = {
    "pending": "Starting",
    "running": "Running",
    "complete": "Complete",
    "failed": "Failed",
    "lost": "Lost",
}
_SUMMARY_KEYS = ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")


class CasError(ValueError):
    """EnforceIndex / JobModifyIndex conflict: a 500 in Nomad."""


def is_terminal(alloc: dict[str, Any]) -> bool:
    return alloc["DesiredStatus"] in ("stop", "evict") or alloc["ClientStatus"] in TERMINAL_CLIENT


@dataclass
class Effects:
    register: list[ServiceInstance] = field(default_factory=list)
    deregister: list[str] = field(default_factory=list)
    start_later: list[str] = field(default_factory=list)
    finish_later: list[str] = field(default_factory=list)
    drain_deadlines: list[tuple[str, float]] = field(default_factory=list)  # node id, seconds
    timers: list[tuple[str, float, Callable[[str], None]]] = field(default_factory=list)

    def merge(self, other: Effects) -> None:
        self.register += other.register
        self.deregister += other.deregister
        self.start_later += other.start_later
        self.finish_later += other.finish_later
        self.drain_deadlines += other.drain_deadlines
        self.timers += other.timers


class Cluster:
    def __init__(
        self,
        fleet: list[Node],
        *,
        registry: ServiceRegistry | None,
        load_delay_s: float,
        region: str,
        seed: int | None = None,
        stop_delay_s: float = 0.0,
        reserved: dict[str, tuple[int, int]] | None = None,
        short_devices: bool = False,
        health_time_scale: float = 0.0,
        initial_check: CheckStatus = "passing",
        model_servers: ModelServers | None = None,
        eval_gc_threshold_s: float = gc.EVAL_GC_THRESHOLD_S,
        eval_gc_interval_s: float = gc.EVAL_GC_INTERVAL_S,
    ) -> None:
        """`reserved`: node id (or "*" for all) -> (CPU MHz, memory MiB) the client keeps
        back; `short_devices`: emulate Nomad 1.9.0-1.11.0 placing fewer instances than asked;
        `health_time_scale`: > 0 runs allocation health and deployments on Nomad's clock times
        this factor (min_healthy_time, healthy_deadline, progress_deadline), 0 makes a running
        allocation healthy at once; `initial_check`: the status a new service check starts in;
        `eval_gc_*`: the server's eval_gc_threshold and how often its GC runs (see gc.py)."""
        ids = [n.id for n in fleet]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"node ids must be unique, repeated: {', '.join(dupes)}")
        self.region = region
        self.registry = registry
        self.load_delay_s = load_delay_s
        self.stop_delay_s = stop_delay_s
        self.short_devices = short_devices
        self.health_time_scale = health_time_scale
        self.initial_check: CheckStatus = initial_check
        self._deployments: dict[str, dict[str, Any]] = {}
        self._progress_at: dict[str, float] = {}  # deployment id -> monotonic of last progress
        self._check_status: dict[str, CheckStatus] = {}  # alloc id -> its checks' status
        self._health_deadline: dict[str, float] = {}  # alloc id -> monotonic deadline
        self.feed = ChangeFeed()
        self.events = EventLog()
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._index = 1
        self._tables = dict.fromkeys(TABLES, 1)
        self._nodes: dict[str, NodeRecord] = {}
        reserved = reserved or {}
        for i, node in enumerate(fleet):
            cpu, memory = reserved.get(node.id, reserved.get("*", (0, 0)))
            self._nodes[node.id] = NodeRecord(
                node=node,
                address=f"10.0.{i // 250}.{10 + i % 250}",
                eligible=node.eligible,
                reserved_cpu_shares=cpu,
                reserved_memory_mb=memory,
            )
        self._jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self._allocs: dict[str, dict[str, Any]] = {}
        self._evals: dict[str, dict[str, Any]] = {}
        # Indexes, as Nomad's state store has them (memdb indexes on job and status), so that
        # a write or a listing costs what touches one job, not everything ever stored:
        # (namespace, job id) -> its allocations / evaluations / deployments, oldest first.
        self._allocs_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._evals_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._deployments_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # Allocations not yet terminal and evaluations created blocked, in creation order.
        # Terminal is for good and an evaluation is blocked only when created, so entries
        # that left the state are dropped as they are met.
        self._maybe_live: dict[str, dict[str, Any]] = {}
        self._maybe_blocked: dict[str, dict[str, Any]] = {}
        # Evaluation GC: what it reaped still counts in its job's summary, as in Nomad, whose
        # summary is a table of counters the GC does not touch.
        self.eval_gc_threshold_s = eval_gc_threshold_s
        self.eval_gc_interval_s = eval_gc_interval_s
        self._last_gc = time.monotonic()
        self._reaped: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
        self._fingerprints: dict[str, tuple[Any, dict[str, str], dict[str, str], list[Any]]] = {}
        self._services: dict[str, list[str]] = {}  # alloc id -> registered service ids
        self._timers: dict[str, threading.Timer] = {}
        self._closed = False
        # Issue 18: a stand-in model server for each running allocation that serves HTTP.
        self.model_servers = model_servers

    # ------------------------------------------------------------ index

    def _bump(self, *tables: str) -> int:
        self._index += 1
        for table in tables:
            self._tables[table] = self._index
        return self._index

    def table_index(self, *tables: str) -> int:
        with self._lock:
            return max(self._tables[t] for t in tables)

    def reset_index(self) -> None:
        """Go backwards, as a restored server would; blocked queries see a lower index."""
        with self._lock:
            self._index = max(1, self._index // 2)
            self._tables = dict.fromkeys(TABLES, self._index)
        self.feed.notify()

    # ------------------------------------------------------------ effects

    def _apply(self, effects: Effects) -> None:
        """Run effects while still holding the lock, so that Consul sees registrations and
        deregistrations in the order the state changed (the registry never calls back)."""
        effects.merge(self._drain_tick())
        self._maybe_gc()
        self.events.flush()
        self.feed.notify()
        if self.registry is not None:
            for service_id in effects.deregister:
                self.registry.deregister_service(service_id)
            for instance in effects.register:
                self.registry.register_service(instance)
        later: list[tuple[str, float, Callable[[str], None]]] = [
            (a, self.load_delay_s, self._start_alloc) for a in effects.start_later
        ]
        later += [(a, self.stop_delay_s, self._finish_stopped) for a in effects.finish_later]
        later += [(f"drain:{n}", d, self._drain_deadline) for n, d in effects.drain_deadlines]
        later += effects.timers
        for alloc_id, delay, action in later:
            timer = threading.Timer(delay, action, args=(alloc_id,))
            timer.daemon = True
            with self._lock:
                if self._closed:
                    return
                self._timers[alloc_id] = timer
            timer.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()

    # ------------------------------------------------------------ nodes

    def node_ids(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def node_json(self, node_id: str) -> dict[str, Any] | None:
        with self._lock:
            record = self._nodes.get(node_id)
            return None if record is None else node_full(record)

    def nodes_json(self, *, resources: bool, os_attrs: bool, prefix: str) -> list[dict[str, Any]]:
        with self._lock:
            records = sorted(self._nodes.values(), key=lambda r: r.node.id)
            return [
                node_stub(r, resources=resources, os_attrs=os_attrs)
                for r in records
                if r.node.id.startswith(prefix)
            ]

    def set_node_eligibility(self, node_id: str, eligible: bool) -> None:
        with self._lock:
            record = self._require_node(node_id)
            record.eligible = eligible
            record.modify_index = self._bump("nodes")
            self._node_event(record)
            effects = self._unblock() if eligible else Effects()
            self._apply(effects)

    def set_node_status(self, node_id: str, status: str) -> None:
        with self._lock:
            record = self._require_node(node_id)
            record.status = status
            record.modify_index = self._bump("nodes")
            self._node_event(record)
            effects = self._unblock() if status == "ready" else self._lose_allocs(node_id)
            self._apply(effects)

    def drain_node(
        self,
        node_id: str,
        spec: dict[str, Any] | None,
        *,
        mark_eligible: bool,
        meta: dict[str, str] | None = None,
    ) -> list[str]:
        """Start (or cancel, with a null spec) a drain, paced as Nomad's drainer paces it.

        While it runs the node reads Drain true with a DrainStrategy and is ineligible. Each
        task group gives up allocations as its migrate max_parallel allows (see _drain_tick);
        at the deadline whatever is left is stopped; a negative deadline stops all at once.
        Returns the evaluations created now.
        """
        with self._lock:
            record = self._require_node(node_id)
            effects = Effects()
            timer = self._timers.pop(f"drain:{node_id}", None)
            if timer is not None:
                timer.cancel()
            if spec is None:
                record.drain_strategy = None
                if mark_eligible:
                    record.eligible = True
                    effects.merge(self._unblock())
                record.modify_index = self._bump("nodes")
                self._node_event(record)
                self._apply(effects)
                return []
            record.eligible = False
            deadline_ns = int(spec.get("Deadline") or 0)
            ignore_system = bool(spec.get("IgnoreSystemJobs"))
            now = datetime.now(UTC)
            force = (
                views.rfc3339(now + timedelta(seconds=deadline_ns / 1e9))
                if deadline_ns > 0
                else "0001-01-01T00:00:00Z"
            )
            # nomad/structs DrainStrategy embeds DrainSpec: its fields are flattened in JSON.
            record.drain_strategy = {
                "Deadline": deadline_ns,
                "IgnoreSystemJobs": ignore_system,
                "ForceDeadline": force,
                "StartedAt": views.rfc3339(now),
            }
            record.last_drain = {
                "AccessorID": "",
                "Meta": meta,
                "StartedAt": views.rfc3339(now),
                "Status": "draining",
                "UpdatedAt": views.rfc3339(now),
            }
            eval_ids = self._migrate(record, force=deadline_ns < 0, effects=effects)
            if deadline_ns > 0:
                effects.drain_deadlines.append((node_id, deadline_ns / 1e9))
            record.modify_index = self._bump("nodes")
            self._node_event(record)
            self._apply(effects)
            return eval_ids

    def _migrate(self, record: NodeRecord, *, force: bool, effects: Effects) -> list[str]:
        """Mark for migration what the drain may take now; complete the drain when empty.

        nomad/drainer/watch_jobs.go handleTaskGroup: per task group, thresholdCount =
        Count - Migrate.MaxParallel and numToDrain = healthy - thresholdCount, where healthy
        counts the group's running allocations with health that are not migrating. So a
        count-1 group with the default max_parallel 1 goes at once, and max_parallel 0
        holds its allocation until the deadline (force).
        """
        strategy = record.drain_strategy or {}
        node_id = record.node.id
        on_node = [a for a in self._live_allocs() if a["NodeID"] == node_id]
        system = [a for a in on_node if a["JobType"] in ("system", "sysbatch")]
        others = [a for a in on_node if a not in system]
        chosen: list[dict[str, Any]] = []
        if force:
            chosen = list(others)
        else:
            by_group: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
            for alloc in others:
                by_group.setdefault(
                    (alloc["Namespace"], alloc["JobID"], alloc["TaskGroup"]), []
                ).append(alloc)
            for (ns, job_id, tg), allocs in by_group.items():
                job = self._jobs.get((ns, job_id))
                group = next(
                    (g for g in (job or {}).get("TaskGroups") or [] if g["Name"] == tg), None
                )
                if job is None or group is None:
                    chosen += allocs
                    continue
                # DeploymentStatus.HasHealth: health set either way; migrating ones excluded.
                healthy = sum(
                    1
                    for a in self._job_allocs(job)
                    if a["TaskGroup"] == tg
                    and not is_terminal(a)
                    and (a.get("DeploymentStatus") or {}).get("Healthy") is not None
                    and not (a.get("DesiredTransition") or {}).get("Migrate")
                )
                threshold = int(group["Count"]) - _max_parallel(job, group)
                chosen += allocs[: max(0, healthy - threshold)]
        # Nomad drains system jobs last, unless told to leave them.
        if len(chosen) == len(others) and not strategy.get("IgnoreSystemJobs"):
            chosen += system
        jobs: dict[tuple[str, str], dict[str, Any]] = {}
        for alloc in chosen:
            alloc["DesiredTransition"] = {**alloc["DesiredTransition"], "Migrate": True}
            self._stop_alloc(alloc, "alloc is being migrated", effects)
            key = (alloc["Namespace"], alloc["JobID"])
            if key in self._jobs and alloc["JobType"] not in ("system", "sysbatch"):
                jobs[key] = self._jobs[key]
        eval_ids = [self._evaluate(job, "node-drain", effects)["ID"] for job in jobs.values()]
        for job in jobs.values():
            self._refresh_status(job)
        left = [a for a in on_node if not is_terminal(a)]
        if not left or (strategy.get("IgnoreSystemJobs") and all(a in system for a in left)):
            self._finish_drain(record)
        return eval_ids

    def _finish_drain(self, record: NodeRecord) -> None:
        """The drain is done: no strategy any more, the node stays ineligible."""
        timer = self._timers.pop(f"drain:{record.node.id}", None)
        if timer is not None:
            timer.cancel()
        record.drain_strategy = None
        if record.last_drain is not None:
            record.last_drain = {
                **record.last_drain,
                "Status": "complete",
                "UpdatedAt": views.rfc3339_now(),
            }
        record.modify_index = self._bump("nodes")
        self._node_event(record)

    def _drain_tick(self) -> Effects:
        """After any change: running drains may take more (a replacement became healthy)."""
        effects = Effects()
        for record in self._nodes.values():
            if record.drain_strategy is not None:
                self._migrate(record, force=False, effects=effects)
        return effects

    def _drain_deadline(self, key: str) -> None:
        node_id = key.split(":", 1)[1]
        with self._lock:
            self._timers.pop(key, None)
            record = self._nodes.get(node_id)
            if record is None or record.drain_strategy is None:
                return
            effects = Effects()
            self._migrate(record, force=True, effects=effects)
            self._apply(effects)

    def _lose_allocs(self, node_id: str) -> Effects:
        """A node that went down loses its allocations; their jobs get replacements."""
        effects = Effects()
        jobs: dict[tuple[str, str], dict[str, Any]] = {}
        for alloc in self._live_allocs():
            if alloc["NodeID"] == node_id:
                alloc["DesiredStatus"] = "stop"
                alloc["DesiredDescription"] = "alloc is lost since its node is down"
                self._finish(alloc, "lost", effects)
                key = (alloc["Namespace"], alloc["JobID"])
                if key in self._jobs:
                    jobs[key] = self._jobs[key]
        for job in jobs.values():
            if not job["Stop"]:
                self._evaluate(job, "node-update", effects)
            self._refresh_status(job)
        return effects

    def set_gpu_health(self, node_id: str, device_id: str, healthy: bool) -> None:
        with self._lock:
            record = self._require_node(node_id)
            known = {i.id for g in device_groups(record.node) for i in g.instances}
            if device_id not in known:
                raise KeyError(f"device {device_id!r} is not fingerprinted on node {node_id!r}")
            record.health[device_id] = healthy
            record.modify_index = self._bump("nodes")
            self._node_event(record)
            effects = self._unblock() if healthy else Effects()
            self._apply(effects)

    def _node_event(self, record: NodeRecord) -> None:
        self.events.emit("Node", "NodeEvent", record.node.id, "", node_full(record), self._index)

    def _job_event(self, job: dict[str, Any], kind: str) -> None:
        self.events.emit("Job", kind, job["ID"], job["Namespace"], views.jcopy(job), self._index)

    def _alloc_event(self, alloc: dict[str, Any]) -> None:
        payload = {k: views.jcopy(v) for k, v in alloc.items() if k != "Job"}
        self.events.emit(
            "Allocation", "AllocationUpdated", alloc["ID"], alloc["Namespace"], payload, self._index
        )

    def _eval_event(self, evaluation: dict[str, Any]) -> None:
        self.events.emit(
            "Evaluation",
            "EvaluationUpdated",
            evaluation["ID"],
            evaluation["Namespace"],
            views.jcopy(evaluation),
            self._index,
        )

    def _require_node(self, node_id: str) -> NodeRecord:
        record = self._nodes.get(node_id)
        if record is None:
            raise KeyError(f"node not found: {node_id}")
        return record

    # ------------------------------------------------------------ jobs

    def register(
        self,
        raw_job: Any,
        *,
        enforce_index: bool = False,
        job_modify_index: int = 0,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        job = canonicalize(raw_job, region=self.region)
        if namespace and not (raw_job or {}).get("Namespace"):
            job["Namespace"] = namespace
        validate(job)
        with self._lock:
            key = (job["Namespace"], job["ID"])
            existing = self._jobs.get(key)
            if enforce_index:
                self._check_cas(existing, job_modify_index)
            changed = existing is None or _spec(existing) != _spec(job) or existing["Stop"]
            if changed:
                index = self._bump("jobs")
                job["Version"] = existing["Version"] + 1 if existing else 0
                job["CreateIndex"] = existing["CreateIndex"] if existing else index
                job["ModifyIndex"] = job["JobModifyIndex"] = index
                job["SubmitTime"] = views.now_ns()
                job["Stop"] = False
                job["Status"] = "pending"
                self._jobs[key] = job
                self._job_event(job, "JobRegistered")
            elif existing is not None:
                job = existing
            effects = Effects()
            if changed:
                self._new_deployment(job, effects)
            evaluation = self._evaluate(job, "job-register", effects)
            self._refresh_status(job)
            if changed and existing is not None:
                effects.merge(self._unblock())  # the old version's devices may fit others
            eval_id = evaluation["ID"]
            response = {
                "EvalID": eval_id,
                "EvalCreateIndex": evaluation["CreateIndex"],
                "JobModifyIndex": job["JobModifyIndex"],
                "Warnings": "",
                "Index": evaluation["CreateIndex"],
                "LastContact": 0,
                "KnownLeader": True,
                "NextToken": "",
            }
            self._apply(effects)
        return response

    def _check_cas(self, existing: dict[str, Any] | None, want: int) -> None:
        if want == 0 and existing is not None:
            raise CasError("Enforcing job modify index 0: job already exists")
        if want != 0 and existing is None:
            raise CasError(f"Enforcing job modify index {want}: job does not exist")
        if existing is not None and existing["JobModifyIndex"] != want:
            raise CasError(
                f"Enforcing job modify index {want}: job exists with conflicting job modify"
                f" index: {existing['JobModifyIndex']}"
            )

    def deregister(self, namespace: str, job_id: str, *, purge: bool) -> dict[str, Any]:
        with self._lock:
            key = (namespace, job_id)
            job = self._jobs.get(key)
            if job is None:
                return {
                    "EvalID": "",
                    "EvalCreateIndex": 0,
                    "JobModifyIndex": 0,
                    "VolumeEvalID": "",
                    "VolumeEvalIndex": 0,
                }
            index = self._bump("jobs")
            job["Stop"] = True
            self._cancel_deployments(job, deployments.JOB_STOPPED)
            self._job_event(job, "JobDeregistered")
            job["ModifyIndex"] = job["JobModifyIndex"] = index
            effects = Effects()
            evaluation = self._evaluate(job, "job-deregister", effects)
            if purge:
                del self._jobs[key]
            else:
                self._refresh_status(job)
            effects.merge(self._unblock())
            response = {
                "EvalID": evaluation["ID"],
                "EvalCreateIndex": evaluation["CreateIndex"],
                "JobModifyIndex": index,
                "VolumeEvalID": "",
                "VolumeEvalIndex": 0,
            }
            self._apply(effects)
        return response

    def job(self, namespace: str, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get((namespace, job_id))
            return views.jcopy(job) if job else None

    def jobs(self, namespace: str = "*") -> list[dict[str, Any]]:
        with self._lock:
            return [
                views.jcopy(j)
                for (ns, _), j in sorted(self._jobs.items())
                if namespace in ("*", ns)
            ]

    def job_stubs(
        self, namespace: str = "*", prefix: str = "", *, meta: bool
    ) -> list[dict[str, Any]]:
        """GET /v1/jobs: one stub per job, built from the live state without copying whole
        jobs (a listing under churn must not cost every job's full spec)."""
        with self._lock:
            return [
                self._job_stub(j, meta=meta)
                for (ns, jid), j in sorted(self._jobs.items())
                if namespace in ("*", ns) and jid.startswith(prefix)
            ]

    def job_summary(self, namespace: str, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get((namespace, job_id))
            return None if job is None else self._summary(job)

    def job_stub(self, job: dict[str, Any], *, meta: bool) -> dict[str, Any]:
        with self._lock:
            return self._job_stub(job, meta=meta)

    def _job_stub(self, job: dict[str, Any], *, meta: bool) -> dict[str, Any]:
        summary = self._summary(job)
        stub = {
            "ID": job["ID"],
            "ParentID": job.get("ParentID", ""),
            "Name": job["Name"],
            "Namespace": job["Namespace"],
            "Datacenters": views.jcopy(job["Datacenters"]),
            "NodePool": job["NodePool"],
            "Multiregion": None,
            "Type": job["Type"],
            "Priority": job["Priority"],
            "Periodic": False,
            "ParameterizedJob": False,
            "Stop": job["Stop"],
            "Status": job["Status"],
            "StatusDescription": job["StatusDescription"],
            "JobSummary": summary,
            "CreateIndex": job["CreateIndex"],
            "ModifyIndex": job["ModifyIndex"],
            "JobModifyIndex": job["JobModifyIndex"],
            "SubmitTime": job["SubmitTime"],
        }
        if meta:
            stub["Meta"] = views.jcopy(job.get("Meta"))
        return stub

    def _summary(self, job: dict[str, Any]) -> dict[str, Any]:
        groups: dict[str, dict[str, int]] = {}
        for group in job["TaskGroups"]:
            groups[group["Name"]] = dict.fromkeys(_SUMMARY_KEYS, 0)
        for alloc in self._job_allocs(job):
            counts = groups.setdefault(alloc["TaskGroup"], dict.fromkeys(_SUMMARY_KEYS, 0))
            counts[_SUMMARY_BINS.get(alloc["ClientStatus"], "Unknown")] += 1
        for tg, bins in self._reaped.get((job["Namespace"], job["ID"]), {}).items():
            counts = groups.setdefault(tg, dict.fromkeys(_SUMMARY_KEYS, 0))
            for name, n in bins.items():
                counts[name] += n
        for evaluation in self._evals_of.get((job["Namespace"], job["ID"]), ()):
            if evaluation["Status"] == "blocked":
                for tg, queued in (evaluation.get("QueuedAllocations") or {}).items():
                    if tg in groups:
                        groups[tg]["Queued"] = queued
        return {
            "JobID": job["ID"],
            "Namespace": job["Namespace"],
            "Summary": groups,
            "Children": {"Pending": 0, "Running": 0, "Dead": 0},
            "CreateIndex": job["CreateIndex"],
            "ModifyIndex": job["ModifyIndex"],
        }

    def _job_allocs(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self._allocs_of.get((job["Namespace"], job["ID"]), ()))

    def _maybe_gc(self) -> None:
        """Reap old terminal evaluations and allocations (gc.py), every eval_gc_interval_s."""
        now = time.monotonic()
        if now - self._last_gc < self.eval_gc_interval_s:
            return
        self._last_gc = now
        cutoff = views.now_ns() - int(self.eval_gc_threshold_s * 1e9)
        evals, allocs = gc.collectable(
            list(self._evals.values()), list(self._allocs.values()), self._jobs, cutoff
        )
        if not evals and not allocs:
            return
        for alloc_id in allocs:
            alloc = self._allocs.pop(alloc_id)
            key = (alloc["Namespace"], alloc["JobID"])
            self._allocs_of[key].remove(alloc)
            bins = self._reaped.setdefault(key, {}).setdefault(alloc["TaskGroup"], {})
            status = _SUMMARY_BINS.get(alloc["ClientStatus"], "Unknown")
            bins[status] = bins.get(status, 0) + 1
            for table in (self._check_status, self._health_deadline, self._maybe_live):
                table.pop(alloc_id, None)
        for eval_id in evals:
            evaluation = self._evals.pop(eval_id)
            self._evals_of[(evaluation["Namespace"], evaluation["JobID"])].remove(evaluation)
            self._maybe_blocked.pop(eval_id, None)
        self._bump("evals", "allocs")  # Eval.Reap is a Raft write

    def _live_allocs(self) -> list[dict[str, Any]]:
        """Allocations not terminal, oldest first (what holds resources on the nodes)."""
        for alloc_id in [i for i, a in self._maybe_live.items() if is_terminal(a)]:
            del self._maybe_live[alloc_id]
        return list(self._maybe_live.values())

    def _refresh_status(self, job: dict[str, Any]) -> None:
        allocs = self._job_allocs(job)
        live = [a for a in allocs if not is_terminal(a)]
        if job["Stop"] and not live:
            status = "dead"
        elif any(a["ClientStatus"] == "running" for a in live):
            status = "running"
        else:
            status = "pending"
        job["Status"] = status

    # ------------------------------------------------------------ scheduling

    def _fingerprint(
        self, record: NodeRecord
    ) -> tuple[dict[str, str], dict[str, str], list[DeviceGroup]]:
        """A node's attributes, meta and device groups for placement, made once per node and
        device health (they change with nothing else; placement only reads them)."""
        health = tuple(sorted(record.health.items()))
        cached = self._fingerprints.get(record.node.id)
        if cached is None or cached[0] != health:
            cached = (health, record.attributes(), record.meta(), record.groups())
            self._fingerprints[record.node.id] = cached
        return cached[1], cached[2], cached[3]

    def _views(self) -> list[NodeView]:
        result = []
        for record in sorted(self._nodes.values(), key=lambda r: r.node.name):
            attributes, meta, groups = self._fingerprint(record)
            view = NodeView(
                node=record.node,
                node_class=record.node_class,
                status=record.status,
                eligible=record.eligible,
                region=self.region,
                attributes=attributes,
                meta=meta,
                groups=groups,
                cpu_shares=int(record.node.cpu_cores) * MHZ_PER_CORE,
                mhz_per_core=MHZ_PER_CORE,
                memory_mb=int(record.node.memory_gb * 1024),
                # Nomad's scheduler subtracts the node's ReservedResources from what it offers.
                used_shares=record.reserved_cpu_shares,
                used_memory_mb=record.reserved_memory_mb,
            )
            result.append(view)
        by_id = {v.node.id: v for v in result}
        for alloc in self._live_allocs():
            holder = by_id.get(alloc["NodeID"])
            if holder is None:
                continue
            view = holder
            res = alloc["AllocatedResources"]
            for task in res["Tasks"].values():
                view.used_shares += task["Cpu"]["CpuShares"]
                view.used_cores += len(task["Cpu"]["ReservedCores"] or [])
                view.used_memory_mb += task["Memory"]["MemoryMB"]
                for device in task["Devices"] or []:
                    view.used_devices.update(device["DeviceIDs"])
            view.used_ports.update(p["Value"] for p in res["Shared"]["Ports"] or [])
            for key in (alloc["JobID"], f"{alloc['JobID']}/{alloc['TaskGroup']}"):
                view.job_allocs[key] = view.job_allocs.get(key, 0) + 1
        return result

    def _evaluate(
        self,
        job: dict[str, Any],
        triggered_by: str,
        effects: Effects,
        evaluation: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Reconcile a job's allocations with its spec; returns the evaluation."""
        index = self._bump("evals")
        if evaluation is None:
            evaluation = views.empty_eval(str(uuid.uuid4()), job, triggered_by, index)
            self._add_eval(evaluation)
            # A new evaluation supersedes the job's blocked one.
            for other in self._evals_of[(job["Namespace"], job["ID"])]:
                if other["Status"] == "blocked":
                    other["Status"] = "canceled"
                    other["StatusDescription"] = "evaluation superseded by a newer one"
                    other["ModifyIndex"] = index
        failures = self._reconcile(job, evaluation, effects)
        queued = {tg: n for tg, (_, n) in failures.items()}
        evaluation["QueuedAllocations"] = {
            g["Name"]: queued.get(g["Name"], 0) for g in job["TaskGroups"]
        }
        evaluation["ModifyIndex"] = index
        evaluation["ModifyTime"] = views.now_ns()
        evaluation["JobModifyIndex"] = job["JobModifyIndex"]
        failed = {tg: m.to_json() for tg, (m, _) in failures.items()} or None
        if evaluation["Status"] == "blocked":
            evaluation["FailedTGAllocs"] = failed
            if not failures:
                evaluation["Status"] = "complete"
                evaluation["StatusDescription"] = ""
            self._eval_event(evaluation)
            return evaluation
        evaluation["FailedTGAllocs"] = failed
        if failures:
            blocked = views.empty_eval(str(uuid.uuid4()), job, "queued-allocs", index)
            blocked.update(
                Status="blocked",
                StatusDescription="created to place remaining allocations",
                PreviousEval=evaluation["ID"],
                FailedTGAllocs=views.jcopy(failed),
                QueuedAllocations=views.jcopy(evaluation["QueuedAllocations"]),
            )
            self._add_eval(blocked)
            evaluation["BlockedEval"] = blocked["ID"]
            self._eval_event(blocked)
        self._eval_event(evaluation)
        return evaluation

    def _reconcile(
        self, job: dict[str, Any], evaluation: dict[str, Any], effects: Effects
    ) -> dict[str, tuple[Metrics, int]]:
        groups = {g["Name"]: g for g in job["TaskGroups"]}
        live_by_group: dict[str, list[dict[str, Any]]] = {}
        for alloc in self._job_allocs(job):
            if is_terminal(alloc):
                continue
            group = groups.get(alloc["TaskGroup"])
            if job["Stop"] or group is None or alloc["JobVersion"] != job["Version"]:
                self._stop_alloc(alloc, ALLOC_NOT_NEEDED, effects)
                continue
            live_by_group.setdefault(alloc["TaskGroup"], []).append(alloc)
        failures: dict[str, tuple[Metrics, int]] = {}
        if job["Stop"]:
            return failures
        node_views = self._views()
        if job["Type"] in ("system", "sysbatch"):
            self._reconcile_system(job, groups, live_by_group, node_views, evaluation, effects)
            return failures
        for name, group in groups.items():
            live = sorted(live_by_group.get(name, []), key=lambda a: a["Name"])
            for extra in live[group["Count"] :]:
                self._stop_alloc(extra, ALLOC_NOT_NEEDED, effects)
            used_names = {a["Name"] for a in live[: group["Count"]]}
            missing = [
                i for i in range(group["Count"]) if f"{job['ID']}.{name}[{i}]" not in used_names
            ]
            for position, slot in enumerate(missing):
                result = place(node_views, job, group, self._rng, short_devices=self.short_devices)
                if isinstance(result, Metrics):
                    result.coalesced_failures = len(missing) - position - 1
                    failures[name] = (result, len(missing) - position)
                    break
                claim(result, job["ID"], name)
                self._add_alloc(
                    build_alloc(job, group, slot, result, evaluation["ID"], self._bump("allocs")),
                    effects,
                )
        return failures

    def _reconcile_system(
        self,
        job: dict[str, Any],
        groups: dict[str, dict[str, Any]],
        live_by_group: dict[str, list[dict[str, Any]]],
        node_views: list[NodeView],
        evaluation: dict[str, Any],
        effects: Effects,
    ) -> None:
        """System jobs: one allocation of each group on every feasible node, none queued."""
        for name, group in groups.items():
            covered = {a["NodeID"] for a in live_by_group.get(name, [])}
            for view in node_views:
                if view.node.id in covered:
                    continue
                result = place([view], job, group, self._rng)
                if isinstance(result, Metrics):
                    continue
                claim(result, job["ID"], name)
                self._add_alloc(
                    build_alloc(job, group, 0, result, evaluation["ID"], self._bump("allocs")),
                    effects,
                )

    def _unblock(self) -> Effects:
        """Room may have appeared: run blocked evaluations again."""
        effects = Effects()
        for evaluation in list(self._maybe_blocked.values()):
            if evaluation["Status"] != "blocked":
                del self._maybe_blocked[evaluation["ID"]]
                continue
            job = self._jobs.get((evaluation["Namespace"], evaluation["JobID"]))
            if job is None or job["Stop"]:
                evaluation["Status"] = "canceled"
                evaluation["ModifyIndex"] = self._bump("evals")
                continue
            self._evaluate(job, "queued-allocs", effects, evaluation)
            self._refresh_status(job)
        return effects

    def _add_eval(self, evaluation: dict[str, Any]) -> None:
        self._evals[evaluation["ID"]] = evaluation
        key = (evaluation["Namespace"], evaluation["JobID"])
        self._evals_of.setdefault(key, []).append(evaluation)
        if evaluation["Status"] == "blocked":
            self._maybe_blocked[evaluation["ID"]] = evaluation

    def _add_alloc(self, alloc: dict[str, Any], effects: Effects) -> None:
        dep = self._active_deployment(alloc["Namespace"], alloc["JobID"])
        if dep is not None and alloc["TaskGroup"] in dep["TaskGroups"]:
            alloc["DeploymentID"] = dep["ID"]
            dep["TaskGroups"][alloc["TaskGroup"]]["PlacedAllocs"] += 1
        self._allocs[alloc["ID"]] = alloc
        self._allocs_of.setdefault((alloc["Namespace"], alloc["JobID"]), []).append(alloc)
        if not is_terminal(alloc):
            self._maybe_live[alloc["ID"]] = alloc
        self._alloc_event(alloc)
        effects.start_later.append(alloc["ID"])

    def _touch(self, alloc: dict[str, Any]) -> None:
        alloc["ModifyIndex"] = self._bump("allocs")
        alloc["ModifyTime"] = views.now_ns()
        self._alloc_event(alloc)

    def _start_alloc(self, alloc_id: str) -> None:
        effects = Effects()
        with self._lock:
            self._timers.pop(alloc_id, None)
            alloc = self._allocs.get(alloc_id)
            if alloc is None or is_terminal(alloc) or alloc["ClientStatus"] != "pending":
                return
            started = views.rfc3339_now()
            for state in alloc["TaskStates"].values():
                state["State"] = "running"
                state["StartedAt"] = started
                state["Events"] += [
                    views.task_event("Task Setup", "Building Task Directory"),
                    views.task_event("Driver", "", "Downloading image"),
                    views.task_event("Started", "", "Task started by client"),
                ]
            alloc["ClientStatus"] = "running"
            alloc["ClientDescription"] = "Tasks are running"
            self._serve_model(alloc)
            self._touch(alloc)
            self._check_status[alloc_id] = self.initial_check
            job = self._jobs.get((alloc["Namespace"], alloc["JobID"]))
            group = next(
                (g for g in (job or alloc["Job"])["TaskGroups"] if g["Name"] == alloc["TaskGroup"]),
                None,
            )
            if self.health_time_scale <= 0 or group is None:
                self._set_health(alloc, True, effects)
            else:
                min_healthy, deadline = deployments.health_params(alloc["Job"], group)
                scale = self.health_time_scale
                self._health_deadline[alloc_id] = time.monotonic() + deadline * scale
                effects.timers.append(
                    (f"health:{alloc_id}", min_healthy * scale, self._health_tick)
                )
            effects.register = service_instances(
                alloc, self._nodes[alloc["NodeID"]], self.initial_check
            )
            self._services[alloc_id] = [s.id for s in effects.register]
            if job is not None:
                self._refresh_status(job)
                self._bump("jobs")
            self._apply(effects)

    # ------------------------------------------------------------ health and deployments

    def _active_deployment(self, namespace: str, job_id: str) -> dict[str, Any] | None:
        found = [
            d for d in self._deployments_of.get((namespace, job_id), ()) if d["Status"] == "running"
        ]
        return max(found, key=lambda d: d["CreateIndex"]) if found else None

    def _cancel_deployments(self, job: dict[str, Any], why: str) -> None:
        while (dep := self._active_deployment(job["Namespace"], job["ID"])) is not None:
            self._end_deployment(dep, "cancelled", why)

    def _end_deployment(self, dep: dict[str, Any], status: str, why: str) -> None:
        dep["Status"], dep["StatusDescription"] = status, why
        dep["ModifyIndex"] = self._bump("deployments")
        dep["ModifyTime"] = views.now_ns()

    def _new_deployment(self, job: dict[str, Any], effects: Effects) -> None:
        """A new job version of a service job with an update strategy is a deployment."""
        self._cancel_deployments(job, deployments.NEWER_JOB)
        if job["Stop"] or not any(deployments.deploys(job, g) for g in job["TaskGroups"]):
            return
        dep = deployments.new_deployment(str(uuid.uuid4()), job, self._bump("deployments"))
        self._deployments[dep["ID"]] = dep
        self._deployments_of.setdefault((dep["Namespace"], dep["JobID"]), []).append(dep)
        progress = deployments.progress_deadline_s(job)
        if progress > 0 and self.health_time_scale > 0:
            self._progress_at[dep["ID"]] = time.monotonic()
            effects.timers.append(
                (f"deploy:{dep['ID']}", progress * self.health_time_scale, self._progress_check)
            )

    def _set_health(self, alloc: dict[str, Any], healthy: bool, effects: Effects) -> None:
        self._touch(alloc)
        alloc["DeploymentStatus"] = deployments.health_status(healthy, alloc["ModifyIndex"])
        dep = self._deployments.get(alloc.get("DeploymentID") or "")
        if dep is None or dep["Status"] != "running":
            return
        state = dep["TaskGroups"].get(alloc["TaskGroup"])
        if state is None:
            return
        state["HealthyAllocs" if healthy else "UnhealthyAllocs"] += 1
        dep["ModifyIndex"] = self._bump("deployments")
        if healthy:
            self._progress_at[dep["ID"]] = time.monotonic()
            if all(s["HealthyAllocs"] >= s["DesiredTotal"] for s in dep["TaskGroups"].values()):
                self._end_deployment(dep, "successful", deployments.SUCCESSFUL)
            return
        # deploymentwatcher: an unhealthy allocation of an active deployment is replaced.
        job = self._jobs.get((alloc["Namespace"], alloc["JobID"]))
        self._stop_alloc(alloc, deployments.RESCHEDULED, effects)
        if job is not None and not job["Stop"]:
            before = set(self._allocs)
            self._evaluate(job, "deployment-watcher", effects)
            new = [a for a in self._allocs if a not in before]
            if new:
                alloc["NextAllocation"] = new[0]
                self._allocs[new[0]]["PreviousAllocation"] = alloc["ID"]
            self._refresh_status(job)

    def _health_tick(self, key: str) -> None:
        """The client's health watcher: healthy once checks pass, unhealthy at the deadline."""
        alloc_id = key.split(":", 1)[1]
        with self._lock:
            self._timers.pop(key, None)
            alloc = self._allocs.get(alloc_id)
            if alloc is None or is_terminal(alloc) or alloc["ClientStatus"] != "running":
                return
            effects = Effects()
            deadline = self._health_deadline.get(alloc_id, 0.0)
            if self._check_status.get(alloc_id) == "passing":
                self._set_health(alloc, True, effects)
            elif time.monotonic() >= deadline:
                self._set_health(alloc, False, effects)
            else:
                step = min(0.05, max(deadline - time.monotonic(), 0.001))
                effects.timers.append((key, step, self._health_tick))
            self._apply(effects)

    def _progress_check(self, key: str) -> None:
        dep_id = key.split(":", 1)[1]
        with self._lock:
            self._timers.pop(key, None)
            dep = self._deployments.get(dep_id)
            job = self._jobs.get((dep["Namespace"], dep["JobID"])) if dep else None
            if dep is None or job is None or dep["Status"] != "running":
                return
            window = deployments.progress_deadline_s(job) * self.health_time_scale
            left = self._progress_at.get(dep_id, 0.0) + window - time.monotonic()
            effects = Effects()
            if left <= 0:
                self._end_deployment(dep, "failed", deployments.PROGRESS_DEADLINE)
            else:
                effects.timers.append((key, left, self._progress_check))
            self._apply(effects)

    def deployments(self, *, namespace: str, job_id: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            found = [
                views.jcopy(d)
                for d in self._deployments.values()
                if namespace in ("*", d["Namespace"]) and job_id in (None, d["JobID"])
            ]
        found.sort(key=lambda d: d["CreateIndex"], reverse=True)
        return found

    def deployment(self, dep_id: str) -> dict[str, Any] | None:
        with self._lock:
            dep = self._deployments.get(dep_id)
            return views.jcopy(dep) if dep else None

    def _serve_model(self, alloc: dict[str, Any]) -> None:
        """Start a stand-in model server for an allocation whose group has an `http` port and a
        service (a multi-node replica's head). Every stand-in server listens on loopback, so the
        allocation reports 127.0.0.1 and the port actually bound, where Nomad would report the
        node's address and the port it picked."""
        if self.model_servers is None:
            return
        shared = alloc["AllocatedResources"]["Shared"]
        http = next((p for p in shared.get("Ports") or [] if p.get("Label") == "http"), None)
        group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
        services = group.get("Services") or [
            s for t in group["Tasks"] for s in t.get("Services") or []
        ]
        if http is None or not services:
            return
        # The scheduler's job Meta names the model (its served name); else the job id.
        model = str((alloc["Job"].get("Meta") or {}).get("llm_scheduler_model") or alloc["JobID"])
        configs = json.dumps([t.get("Config") for t in group["Tasks"]], default=str)
        runtime = "sglang" if "sglang" in configs else "vllm"
        port = self.model_servers.start(alloc["ID"], model, runtime)
        http["Value"], http["HostIP"] = port, "127.0.0.1"
        for net in shared.get("Networks") or []:
            net["IP"] = "127.0.0.1"
            for dyn in net.get("DynamicPorts") or []:
                if dyn.get("Label") == "http":
                    dyn["Value"] = port

    def _stop_alloc(
        self,
        alloc: dict[str, Any],
        description: str,
        effects: Effects,
        client_status: str = "complete",
    ) -> None:
        alloc["DesiredStatus"] = "stop"
        alloc["DesiredDescription"] = description
        if self.stop_delay_s > 0 and alloc["ClientStatus"] == "running":
            # The client deregisters services first, then kills the tasks; the devices are
            # free for the scheduler as soon as the allocation is desired to stop.
            effects.deregister += self._services.pop(alloc["ID"], [])
            self._touch(alloc)
            effects.finish_later.append(alloc["ID"])
            return
        self._finish(alloc, client_status, effects)

    def _finish_stopped(self, alloc_id: str) -> None:
        with self._lock:
            self._timers.pop(alloc_id, None)
            alloc = self._allocs.get(alloc_id)
            if alloc is None or alloc["ClientStatus"] in TERMINAL_CLIENT:
                return
            effects = Effects()
            self._finish(alloc, "complete", effects)
            job = self._jobs.get((alloc["Namespace"], alloc["JobID"]))
            if job is not None:
                self._refresh_status(job)
                self._bump("jobs")
            self._apply(effects)

    def _finish(self, alloc: dict[str, Any], client_status: str, effects: Effects) -> None:
        timer = self._timers.pop(alloc["ID"], None)
        if timer is not None:
            timer.cancel()
        if alloc["ClientStatus"] not in TERMINAL_CLIENT:
            alloc["ClientStatus"] = client_status
            alloc["ClientDescription"] = (
                "All tasks have completed" if client_status == "complete" else "Failed tasks"
            )
            finished = views.rfc3339_now()
            for state in alloc["TaskStates"].values():
                state["State"] = "dead"
                state["Failed"] = client_status == "failed"
                state["FinishedAt"] = finished
                state["Events"] += [
                    views.task_event("Killing", "", "Sent interrupt"),
                    views.task_event("Killed", "", "Task successfully killed"),
                ]
        self._touch(alloc)
        effects.deregister += self._services.pop(alloc["ID"], [])
        if self.model_servers is not None:
            self.model_servers.stop(alloc["ID"])

    def stop_allocation(self, alloc_id: str) -> dict[str, Any]:
        """POST /v1/allocation/<id>/stop: stop it; the job's evaluation places a replacement."""
        with self._lock:
            alloc = self._allocs.get(alloc_id)
            if alloc is None:
                raise KeyError("alloc not found")
            effects = Effects()
            self._stop_alloc(alloc, "alloc was stopped by user", effects)
            job = self._jobs.get((alloc["Namespace"], alloc["JobID"]))
            evaluation = (
                self._evaluate(job, "alloc-stop", effects) if job and not job["Stop"] else None
            )
            effects.merge(self._unblock())
            index = self._index
            self._apply(effects)
        return {"EvalID": evaluation["ID"] if evaluation else "", "Index": index}

    def fail_allocation(self, alloc_id: str, *, reschedule: bool = True) -> str | None:
        """Mark an allocation failed (its tasks died); optionally place a replacement."""
        with self._lock:
            alloc = self._allocs.get(alloc_id)
            if alloc is None:
                raise KeyError(f"alloc not found: {alloc_id}")
            effects = Effects()
            self._finish(alloc, "failed", effects)
            alloc["DesiredStatus"] = "stop" if not reschedule else alloc["DesiredStatus"]
            job = self._jobs.get((alloc["Namespace"], alloc["JobID"]))
            replacement: str | None = None
            if reschedule and job is not None and not job["Stop"]:
                before = set(self._allocs)
                self._evaluate(job, "alloc-failure", effects)
                new = [a for a in self._allocs if a not in before]
                if new:
                    replacement = new[0]
                    alloc["NextAllocation"] = replacement
                    self._allocs[replacement]["PreviousAllocation"] = alloc_id
            if job is not None:
                self._refresh_status(job)
            effects.merge(self._unblock())
            self._apply(effects)
        return replacement

    def set_service_check(self, alloc_id: str, status: CheckStatus) -> None:
        with self._lock:
            self._check_status[alloc_id] = status
            if self.registry is not None:
                for service_id in self._services.get(alloc_id, []):
                    self.registry.set_check_status(service_id, status)

    def alloc(self, alloc_id: str) -> dict[str, Any] | None:
        with self._lock:
            alloc = self._allocs.get(alloc_id)
            return views.jcopy(alloc) if alloc else None

    def allocs(
        self,
        *,
        namespace: str = "*",
        job_id: str | None = None,
        node_id: str | None = None,
        prefix: str = "",
    ) -> list[dict[str, Any]]:
        with self._lock:
            return views.jcopy(self._find_allocs(namespace, job_id, node_id, prefix))

    def alloc_stubs(
        self,
        *,
        namespace: str = "*",
        job_id: str | None = None,
        prefix: str = "",
        eval_id: str | None = None,
        resources: bool = False,
        task_states: bool = True,
        keep: Callable[[str], bool] = lambda _: True,
    ) -> list[dict[str, Any]]:
        """Allocation listings: only the stub's fields are copied, never the whole allocation
        with its job. `keep` says which namespaces the caller may read."""
        with self._lock:
            return [
                views.alloc_stub(a, resources=resources, task_states=task_states)
                for a in self._find_allocs(namespace, job_id, None, prefix)
                if keep(a["Namespace"]) and eval_id in (None, a["EvalID"])
            ]

    def _find_allocs(
        self, namespace: str, job_id: str | None, node_id: str | None, prefix: str
    ) -> list[dict[str, Any]]:
        """Newest first, as Nomad lists them."""
        if job_id is not None and namespace != "*":
            candidates: Any = self._allocs_of.get((namespace, job_id), ())
        else:
            candidates = self._allocs.values()
        found = [
            a
            for a in candidates
            if namespace in ("*", a["Namespace"])
            and (job_id is None or a["JobID"] == job_id)
            and (node_id is None or a["NodeID"] == node_id)
            and a["ID"].startswith(prefix)
        ]
        found.sort(key=lambda a: (a["CreateIndex"], a["ID"]), reverse=True)
        return found

    # ------------------------------------------------------------ evaluations

    def evaluation(self, eval_id: str) -> dict[str, Any] | None:
        with self._lock:
            evaluation = self._evals.get(eval_id)
            if evaluation is None:
                return None
            result = views.jcopy(evaluation)
            related = [
                e
                for e in self._evals.values()
                if e["ID"] in (evaluation["BlockedEval"], evaluation["PreviousEval"])
            ]
            result["RelatedEvals"] = [views.eval_stub(e) for e in related] or None
            return result

    def evaluations(
        self, *, namespace: str = "*", job_id: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            if job_id is not None and namespace != "*":
                candidates: Any = self._evals_of.get((namespace, job_id), ())
            else:
                candidates = self._evals.values()
            found = [
                views.jcopy(e)
                for e in candidates
                if namespace in ("*", e["Namespace"]) and (job_id is None or e["JobID"] == job_id)
            ]
        found.sort(key=lambda e: e["CreateIndex"], reverse=True)
        return found

    def run_locked(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            return fn()


def _max_parallel(job: dict[str, Any], group: dict[str, Any]) -> int:
    """The group's migrate max_parallel, else the job's, else Nomad's default of 1."""
    for block in (group.get("Migrate"), job.get("Migrate")):
        if isinstance(block, dict) and block.get("MaxParallel") is not None:
            return int(block["MaxParallel"])
    return 1


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k not in _SERVER_FIELDS}


def register_error_status(exc: Exception) -> int:
    return 500 if isinstance(exc, JobValidationError | CasError) else 400
