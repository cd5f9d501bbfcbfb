"""Build the decision core's Snapshot from Nomad and Consul, in one pass of reads.

Any read that fails raises ReadFailed: the service then acts on nothing (no partial data).
Bad operator input is not a read failure: it becomes error lines, and the last good value
of that key (if this process saw one) stands in for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.adapters.catalog import Catalog, read_catalog
from scheduler.adapters.consul_kv import ConsulClient, ConsulError, kv_list, passing_allocs
from scheduler.adapters.gpu_reports import apply_reports, records_from_kv
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_faults import RefusalMemory, refusal, short_allocation
from scheduler.adapters.nomad_jobs import (
    OwnedJob,
    alloc_devices,
    alloc_live,
    alloc_terminal,
    owned_job,
    replica_from,
    service_name,
    specs_of,
)
from scheduler.adapters.nomad_nodes import (
    Usage,
    alloc_usage,
    less_usage,
    node_from_nomad,
    shares_per_core,
)
from scheduler.core.models import (
    Demand,
    DesiredMark,
    Hold,
    Load,
    Model,
    Node,
    Plan,
    Quota,
    Settings,
    Shard,
    Snapshot,
)
from scheduler.core.scaling import remember, window_of
from scheduler.demand import DemandError, DemandSource
from scheduler.demand.kv import KVDemandSource
from scheduler.demand.signals import Signals, SignalSource, Target, combine


class ReadFailed(Exception):
    """Nomad, Consul or the demand source could not be read; nothing may be decided."""


@dataclass
class ClusterView:
    snapshot: Snapshot
    jobs: dict[str, OwnedJob]  # replica id -> its job
    purgeable: list[str]  # stopped job ids with no allocation left
    catalog: Catalog
    frozen_models: set[str]  # bad model/demand value: keep their replicas, stop nothing
    blocked_owners: set[str]  # bad quota with no last good value: start nothing under it
    warnings: list[str] = field(default_factory=list)
    kv_index: int = 0
    preempted: dict[str, str] = field(default_factory=dict)  # replica -> model, from KV state
    kv_entries: list[dict[str, Any]] = field(default_factory=list)
    job_ids: set[str] = field(default_factory=set)  # every job id Nomad listed, ours or not
    # Replicas Nomad failed (placement refused, devices short) -> why: stopped and reported.
    faults: dict[str, str] = field(default_factory=dict)

    @property
    def input_errors(self) -> list[str]:
        return self.catalog.all_errors()


@dataclass
class _LastGood:
    models: dict[str, Model] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    demand: dict[str, Demand] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)


def scrape_targets(
    jobs: list[OwnedJob], allocs: dict[str, list[dict[str, Any]]], healthy: set[str]
) -> dict[str, list[Target]]:
    """Where each ready replica serves: its running, check-passing allocations (only a
    multi-node replica's head has a check and an HTTP server), at the `http` port's address."""
    out: dict[str, list[Target]] = {}
    for job in jobs:
        if job.stopped:
            continue
        for alloc in allocs.get(job.job_id, []):
            if alloc.get("ClientStatus") != "running" or alloc.get("ID") not in healthy:
                continue
            url = http_address(alloc)
            if url is not None:
                out.setdefault(job.model, []).append(
                    Target(job.model, job.replica, str(alloc["ID"]), url)
                )
    return out


def http_address(alloc: dict[str, Any]) -> str | None:
    """http://host:port of the allocation's `http` port (AllocatedResources.Shared.Ports, with
    the network's IP when a port has no HostIP)."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    for port in shared.get("Ports") or []:
        if port.get("Label") == "http" and port.get("Value"):
            host = port.get("HostIP") or next(
                (n.get("IP") for n in shared.get("Networks") or [] if n.get("IP")), None
            )
            if host:
                return f"http://{host}:{int(port['Value'])}"
    return None


def parse_state(entries: list[dict[str, Any]], key: str) -> tuple[dict[str, Hold], dict[str, str]]:
    """(holds, replica -> model it was preempted for) from the scheduler's state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    if not raw:
        return {}, {}
    try:
        data = json.loads(raw)
        holds = {k: Hold.model_validate(v) for k, v in (data.get("holds") or {}).items()}
        preempted = {str(k): str(v) for k, v in (data.get("preempted") or {}).items()}
        return holds, preempted
    except (ValueError, TypeError, AttributeError):
        return {}, {}  # our own key; a bad value only loses holds


def parse_lifecycle(
    entries: list[dict[str, Any]], key: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(failed roll-outs: model -> spec digest, moves: replica -> replacement) from the
    scheduler's state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    try:
        data = json.loads(raw) if raw else {}
        stalled = {str(k): str(v) for k, v in (data.get("stalled") or {}).items()}
        moves = {str(k): str(v) for k, v in (data.get("moves") or {}).items()}
        return stalled, moves
    except (ValueError, TypeError, AttributeError):
        return {}, {}  # our own key; a bad value only forgets a failed roll-out or a move


def refused_rollouts(
    jobs: list[OwnedJob], faults: dict[str, str], specs: dict[str, dict[str, str]]
) -> dict[str, str]:
    """A replica on its model's current spec that Nomad failed (placement refused, devices
    short) while others of the model still run an older spec: that roll-out stops."""
    out: dict[str, str] = {}
    for job in jobs:
        current = specs.get(job.model, {})
        if job.replica not in faults or not job.spec or current.get(job.profile) != job.spec:
            continue
        if any(
            j.model == job.model and not j.stopped and j.spec and j.spec != job.spec for j in jobs
        ):
            out[job.model] = job.spec
    return out


class SnapshotBuilder:
    def __init__(
        self,
        nomad: NomadAPI,
        consul_client: ConsulClient,
        layout: KVLayout,
        *,
        demand_source: DemandSource | None = None,
        signal_source: SignalSource | None = None,
        max_value_bytes: int = 64 * 1024,
    ) -> None:
        self.nomad = nomad
        self.consul = consul_client
        self.layout = layout
        self.demand_source: DemandSource = demand_source or KVDemandSource()
        self.max_value_bytes = max_value_bytes
        self._last = _LastGood()
        self._node_cache: dict[str, tuple[int, Node, float]] = {}  # id -> (index, node, MHz)
        self.refusals = RefusalMemory()
        self._job_cache: dict[str, tuple[int, OwnedJob | None]] = {}
        self._last_health: dict[str, set[str]] = {}
        self._listed: list[str] = []
        # Issue 18: the servers' signals, the last time each model's servers had work, and
        # each model's recent desired counts (handed back to the core for stabilisation).
        self.signal_source = signal_source
        self._seen: dict[str, datetime] = {}
        self._marks: dict[str, list[DesiredMark]] = {}
        self.last_signals = Signals()

    # ------------------------------------------------------------------ reads

    def _nodes(self, usage: dict[str, Usage]) -> list[Node]:
        """Nodes less their reserved resources and what other allocations hold on them."""
        stubs = self.nomad.get("/v1/nodes")
        nodes = []
        for stub in stubs or []:
            nid, mod = str(stub["ID"]), int(stub.get("ModifyIndex") or 0)
            cached = self._node_cache.get(nid)
            if cached is None or cached[0] != mod or mod == 0:
                body = self.nomad.get(f"/v1/node/{nid}")
                mhz = shares_per_core(body.get("NodeResources") or {})
                cached = (mod, node_from_nomad(body), mhz)
                self._node_cache[nid] = cached
            nodes.append(less_usage(cached[1], usage.get(nid), cached[2]))
        return sorted(nodes, key=lambda n: n.id)

    def _jobs(self) -> list[OwnedJob]:
        out = []
        self._listed = []
        for stub in self.nomad.get("/v1/jobs", {"prefix": "llm-"}) or []:
            jid, mod = str(stub["ID"]), int(stub.get("ModifyIndex") or 0)
            self._listed.append(jid)
            cached = self._job_cache.get(jid)
            if cached is None or cached[0] != mod or mod == 0:
                body = self.nomad.job_or_none(jid)
                cached = (mod, owned_job(body) if body else None)
                self._job_cache[jid] = cached
            if cached[1] is not None:
                out.append(cached[1])
        return out

    def _allocs(self, ours: set[str]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Usage]]:
        """One listing of every namespace's allocations (read-job wherever they may be):
        our jobs' allocations by job id, and per node what the others hold."""
        own_ns = self.nomad.namespace or "default"
        params = {"resources": "true", "namespace": "*", "task_states": "false"}
        by_job: dict[str, list[dict[str, Any]]] = {}
        usage: dict[str, Usage] = {}
        for alloc in self.nomad.get("/v1/allocations", params) or []:
            jid = str(alloc.get("JobID"))
            if alloc.get("Namespace", "default") == own_ns and jid in ours:
                by_job.setdefault(jid, []).append(alloc)
            elif not alloc_terminal(alloc):
                alloc_usage(alloc, usage.setdefault(str(alloc.get("NodeID")), Usage()))
        return by_job, usage

    def _faults(
        self, jobs: list[OwnedJob], allocs: dict[str, list[dict[str, Any]]], now: datetime
    ) -> dict[str, str]:
        """Replicas Nomad failed. Evaluations are read only for our jobs with no allocation
        (placement pending or refused), so a steady cluster costs no extra reads."""
        faults: dict[str, str] = {}
        for job in jobs:
            if job.stopped:
                continue
            present = [a for a in allocs.get(job.job_id, []) if not alloc_terminal(a)]
            if present:
                live = [a for a in present if alloc_live(a)]
                short = short_allocation(job, live)
                if short:
                    faults[job.replica] = short
                    # The instances it did not get are busy for Nomad: keep them out too.
                    got = {d for a in live for d in alloc_devices(a)}
                    missing = [
                        Shard(node=s.node, gpus=[d for d in s.gpus if d not in got])
                        for s in job.wish
                    ]
                    self.refusals.remember([s for s in missing if s.gpus], True, now)
                continue
            refused = refusal(self.nomad.get(f"/v1/job/{job.job_id}/evaluations"))
            if refused is not None:
                why, devices_only = refused
                faults[job.replica] = f"placement refused by Nomad: {why}"
                self.refusals.remember(job.wish, devices_only, now)
        return faults

    def remember(self, snapshot: Snapshot, plan: Plan) -> None:
        """Keep each model's desired count of this pass for the next passes' scale-down window."""
        for m in snapshot.models:
            status = plan.models.get(m.name)
            if status is None or status.recommended is None:
                continue
            self._marks[m.name] = remember(
                self._marks.get(m.name, []),
                snapshot.now,
                status.recommended,
                window_of(m, snapshot.settings),
            )
        names = {m.name for m in snapshot.models}
        self._marks = {k: v for k, v in self._marks.items() if k in names}
        self._seen = {k: v for k, v in self._seen.items() if k in names}

    # ------------------------------------------------------------------ merge

    def _merge_catalog(self, cat: Catalog) -> tuple[list[Model], set[str], set[str]]:
        frozen = set(cat.bad_models)
        models = dict(cat.models)
        for name in cat.bad_models:
            if name not in models and name in self._last.models:
                models[name] = self._last.models[name]
        self._last.models.update(cat.models)
        for name in list(self._last.models):
            if name not in models:
                del self._last.models[name]  # deleted by the operator: forget it
        quotas = dict(cat.quotas)
        blocked: set[str] = set()
        for owner in cat.bad_quotas:
            if owner in self._last.quotas:
                quotas[owner] = self._last.quotas[owner]
            else:
                blocked.add(owner)
        self._last.quotas = dict(quotas)
        cat.quotas = quotas
        if cat.settings is not None:
            self._last.settings = cat.settings
        cat.settings = self._last.settings
        for name in cat.bad_models:
            if name not in cat.demand and name in self._last.demand:
                cat.demand[name] = self._last.demand[name]
        self._last.demand = dict(cat.demand)
        return sorted(models.values(), key=lambda m: m.name), frozen, blocked

    def _healthy(self, models: set[str], warnings: list[str]) -> set[str]:
        """Allocation ids passing their Consul checks. Unreadable health keeps the last answer:
        readiness only ever delays what a replica may be used for, so stale is safe."""
        healthy: set[str] = set()
        for model in sorted(models):
            try:
                self._last_health[model] = passing_allocs(self.consul, service_name(model))
            except ConsulError as exc:
                warnings.append(f"health of {service_name(model)} unreadable: {exc}")
            healthy |= self._last_health.get(model, set())
        return healthy

    def build(self, now: datetime) -> ClusterView:
        try:
            kv_index, entries = kv_list(self.consul, self.layout.prefix)
            jobs = self._jobs()
            allocs, usage = self._allocs({j.job_id for j in jobs})
            faults = self._faults(jobs, allocs, now)
            nodes = self.refusals.apply(self._nodes(usage), now)
            cat = read_catalog(entries, self.layout, self.max_value_bytes)
            models, frozen, blocked = self._merge_catalog(cat)
            demand = self.demand_source.read([m.name for m in models], cat.demand, now)
            nodes, warnings = apply_reports(
                nodes, records_from_kv(entries, self.layout), layout=self.layout
            )
            holds, preempted = parse_state(entries, self.layout.holds)
            stalled, moves = parse_lifecycle(entries, self.layout.holds)
        except (NomadError, ConsulError, DemandError) as exc:
            raise ReadFailed(str(exc)) from exc
        healthy = self._healthy({j.model for j in jobs if not j.stopped}, warnings)
        load: dict[str, Load] = {}
        if self.signal_source is not None:
            targets = scrape_targets(jobs, allocs, healthy)
            try:
                sig = self.signal_source.read_signals(sorted(m.name for m in models), targets, now)
            except DemandError as exc:
                raise ReadFailed(str(exc)) from exc
            for name, at in sig.seen.items():
                self._seen[name] = max(at, self._seen.get(name, at))
            sig.seen = {m.name: self._seen[m.name] for m in models if m.name in self._seen}
            demand = combine(demand, sig)
            load = sig.load
            warnings += sig.errors
            self.last_signals = sig
        replicas, by_replica, purgeable = [], {}, []
        for job in sorted(jobs, key=lambda j: j.job_id):
            last_used = demand[job.model].last_used if job.model in demand else None
            rep = replica_from(
                job, allocs.get(job.job_id, []), healthy, last_used, preempted.get(job.replica)
            )
            if rep is None:
                purgeable.append(job.job_id)
                continue
            replicas.append(rep)
            by_replica[rep.id] = job
        names = {m.name for m in models}
        specs = specs_of([m for m in models if m.serve is not None])
        stalled.update(refused_rollouts(jobs, faults, specs))
        snapshot = Snapshot(
            now=now,
            settings=cat.settings or Settings(),
            nodes=nodes,
            models=models,
            quotas=sorted(cat.quotas.values(), key=lambda q: q.owner),
            demand={k: v for k, v in demand.items() if k in names},
            replicas=replicas,
            holds=holds,
            specs=specs,
            stalled=stalled,
            moves=moves,
            load={k: v for k, v in load.items() if k in names},
            recent_desired={k: v for k, v in self._marks.items() if k in names},
        )
        return ClusterView(
            snapshot=snapshot,
            jobs=by_replica,
            purgeable=purgeable,
            catalog=cat,
            frozen_models=frozen,
            blocked_owners=blocked,
            warnings=warnings,
            kv_index=kv_index,
            preempted=preempted,
            kv_entries=entries,
            job_ids=set(self._listed),
            faults=faults,
        )
