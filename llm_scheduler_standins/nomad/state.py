"""The stand-in's cluster: nodes, jobs, evaluations and allocations under one Raft-like index.

All mutation happens under one lock. The methods collect effects (Consul registrations,
timers) and apply them before releasing it, so Consul sees them in the order they happened.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.fleet_model import HostVolume, Node
from llm_scheduler_standins.model_cache import StandinCaches, model_source
from llm_scheduler_standins.nomad import (
    alloc_store,
    batch,
    drain,
    gc,
    job_store,
    reconciler,
    rollouts,
    views,
)
from llm_scheduler_standins.nomad.effects import Effects
from llm_scheduler_standins.nomad.events import EventLog
from llm_scheduler_standins.nomad.fingerprint import device_groups
from llm_scheduler_standins.nomad.nodes import NodeRecord, node_full, node_stub
from llm_scheduler_standins.nomad.watch import ChangeFeed
from llm_scheduler_standins.registry import CheckStatus, ServiceRegistry

if TYPE_CHECKING:
    from llm_scheduler_standins.model_server import ModelServers

TABLES = ("nodes", "jobs", "allocs", "evals", "deployments")


class Cluster:
    """Nodes, jobs, evaluations, allocations and deployments under one index and one lock.

    `reserved`: node id (or "*" for all) -> (CPU MHz, memory MiB) the client keeps back;
    `short_devices`: emulate Nomad 1.9.0-1.11.0 placing fewer instances than asked;
    `health_time_scale`: > 0 runs allocation health and deployments on Nomad's clock times
    this factor (min_healthy_time, healthy_deadline, progress_deadline), 0 makes a running
    allocation healthy at once; `initial_check`: the status a new service check starts in;
    `eval_gc_*`: the server's eval_gc_threshold and how often its GC runs (see gc.py).

    Its operations live in the modules named below (drain, job_store, reconciler, rollouts,
    alloc_store), as functions of the cluster.
    """

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
        caches: StandinCaches | None = None,
        eval_gc_threshold_s: float = gc.EVAL_GC_THRESHOLD_S,
        eval_gc_interval_s: float = gc.EVAL_GC_INTERVAL_S,
    ) -> None:
        self._nodes = _node_records(fleet, reserved or {})
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
        self.feed, self.events = ChangeFeed(), EventLog()
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._index = 1
        self._tables = dict.fromkeys(TABLES, 1)
        self._new_tables()
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
        # A stand-in model server for each running allocation that serves HTTP.
        self.model_servers = model_servers
        # The nodes' model caches: with them, an allocation stays pending while its weights
        # download (cold) or load (warm), after load_delay_s.
        self.caches = caches

    def _new_tables(self) -> None:
        """Jobs, allocations and evaluations, and the indexes over them."""
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

    def _start_delay_s(self, alloc_id: str) -> float:
        alloc = self._allocs.get(alloc_id)
        if self.caches is None or alloc is None or batch.is_batch(alloc):
            return self.load_delay_s  # a batch task downloads once running (batch.py)
        source = model_source(alloc["Job"], alloc["TaskGroup"])
        return self.load_delay_s + self.caches.start(alloc["NodeID"], source)

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
            (a, self._start_delay_s(a), self._start_alloc) for a in effects.start_later
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

    def set_host_volumes(self, node_id: str, volumes: dict[str, HostVolume]) -> None:
        """The client restarted with other host volumes: the node advertises these; what runs
        there keeps running (Nomad checks volumes only when it places)."""
        with self._lock:
            record = self._require_node(node_id)
            record.node = record.node.model_copy(update={"host_volumes": volumes})
            record.modify_index = self._bump("nodes")
            self._node_event(record)
            self._apply(self._unblock())

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

    # ------------------------------------------------------------ scheduling

    # ------------------------------------------------------------ health and deployments

    # ------------------------------------------------------------ evaluations

    # ------------------------------------------------------------ operations, by module

    drain_node = drain.drain_node
    _migrate = drain.migrate
    _finish_drain = drain.finish_drain
    _drain_tick = drain.drain_tick
    _drain_deadline = drain.drain_deadline
    _lose_allocs = drain.lose_allocs

    register = job_store.register
    _check_cas = job_store.check_cas
    deregister = job_store.deregister
    job = job_store.job
    jobs = job_store.jobs
    job_stubs = job_store.job_stubs
    job_summary = job_store.job_summary
    job_stub = job_store.job_stub
    _job_stub = job_store.stub_of
    _summary = job_store.summary
    _job_allocs = job_store.job_allocs
    _maybe_gc = job_store.maybe_gc
    _live_allocs = job_store.live_allocs
    _refresh_status = job_store.refresh_status

    _fingerprint = reconciler.fingerprint
    _views = reconciler.node_views
    _evaluate = reconciler.evaluate
    _reconcile = reconciler.reconcile
    _reconcile_system = reconciler.reconcile_system
    _unblock = reconciler.unblock
    _add_eval = reconciler.add_eval
    _add_alloc = reconciler.add_alloc
    _touch = reconciler.touch
    _start_alloc = reconciler.start_alloc

    _active_deployment = rollouts.active_deployment
    _cancel_deployments = rollouts.cancel_deployments
    _end_deployment = rollouts.end_deployment
    _new_deployment = rollouts.new_deployment
    _set_health = rollouts.set_health
    _health_tick = rollouts.health_tick
    _progress_check = rollouts.progress_check
    deployments = rollouts.list_deployments
    deployment = rollouts.get_deployment
    _serve_model = rollouts.serve_model

    _stop_alloc = alloc_store.stop_alloc
    _finish_stopped = alloc_store.finish_stopped
    _finish = alloc_store.finish
    _task_exited = batch.task_exited
    stop_allocation = alloc_store.stop_allocation
    fail_allocation = alloc_store.fail_allocation
    set_service_check = alloc_store.set_service_check
    alloc = alloc_store.alloc
    allocs = alloc_store.allocs
    alloc_stubs = alloc_store.alloc_stubs
    _find_allocs = alloc_store.find_allocs
    evaluation = alloc_store.evaluation
    evaluations = alloc_store.evaluations

    def run_locked(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            return fn()


def _node_records(fleet: list[Node], reserved: dict[str, tuple[int, int]]) -> dict[str, NodeRecord]:
    """Each node's record, at a 10.0.x.y address (nothing may dial those)."""
    ids = [n.id for n in fleet]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"node ids must be unique, repeated: {', '.join(dupes)}")
    records: dict[str, NodeRecord] = {}
    for i, node in enumerate(fleet):
        # The fleet's own `reserved` block, unless the caller sets it for the node.
        own = getattr(node, "reserved", None)
        default = (own.cpu, own.memory) if own else (0, 0)
        cpu, memory = reserved.get(node.id, reserved.get("*", default))
        records[node.id] = NodeRecord(
            node=node,
            address=f"10.0.{i // 250}.{10 + i % 250}",
            eligible=node.eligible,
            reserved_cpu_shares=cpu,
            reserved_memory_mb=memory,
            reserved_ports=own.reserved_ports if own else "",
        )
    return records
