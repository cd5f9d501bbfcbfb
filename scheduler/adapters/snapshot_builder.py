"""Build the decision core's Snapshot from Nomad and Consul, in one pass of reads.

Any read that fails raises ReadFailed: the service then acts on nothing (no partial data).
Bad operator input is not a read failure: it becomes error lines, and the last good value
of that key (if this process saw one) stands in for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.adapters.catalog import Catalog, read_catalog
from scheduler.adapters.consul_kv import ConsulClient, ConsulError, kv_list, passing_allocs
from scheduler.adapters.gpu_reports import apply_reports, records_from_kv
from scheduler.adapters.json_bounds import bounded_loads
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_jobs import OwnedJob, owned_job, replica_from, service_name
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.core.models import Demand, Hold, Model, Node, Quota, Settings, Snapshot
from scheduler.demand import DemandError, DemandSource
from scheduler.demand.kv import KVDemandSource


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

    @property
    def input_errors(self) -> list[str]:
        return self.catalog.all_errors()


@dataclass
class _LastGood:
    models: dict[str, Model] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    demand: dict[str, Demand] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)


def parse_state(entries: list[dict[str, Any]], key: str) -> tuple[dict[str, Hold], dict[str, str]]:
    """(holds, replica -> model it was preempted for) from the scheduler's state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    if not raw:
        return {}, {}
    try:
        data = bounded_loads(raw, 1 << 20)
        holds = {k: Hold.model_validate(v) for k, v in (data.get("holds") or {}).items()}
        preempted = {str(k): str(v) for k, v in (data.get("preempted") or {}).items()}
        return holds, preempted
    except (ValueError, TypeError, AttributeError):
        return {}, {}  # our own key; a bad value only loses holds


class SnapshotBuilder:
    def __init__(
        self,
        nomad: NomadAPI,
        consul_client: ConsulClient,
        layout: KVLayout,
        *,
        demand_source: DemandSource | None = None,
        max_value_bytes: int = 64 * 1024,
    ) -> None:
        self.nomad = nomad
        self.consul = consul_client
        self.layout = layout
        self.demand_source: DemandSource = demand_source or KVDemandSource()
        self.max_value_bytes = max_value_bytes
        self._last = _LastGood()
        self._node_cache: dict[str, tuple[int, Node]] = {}
        self._job_cache: dict[str, tuple[int, OwnedJob | None]] = {}
        self._last_health: dict[str, set[str]] = {}
        self._listed: list[str] = []

    # ------------------------------------------------------------------ reads

    def _nodes(self) -> list[Node]:
        stubs = self.nomad.get("/v1/nodes")
        nodes = []
        for stub in stubs or []:
            nid, mod = str(stub["ID"]), int(stub.get("ModifyIndex") or 0)
            cached = self._node_cache.get(nid)
            if cached is None or cached[0] != mod or mod == 0:
                cached = (mod, node_from_nomad(self.nomad.get(f"/v1/node/{nid}")))
                self._node_cache[nid] = cached
            nodes.append(cached[1])
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

    def _allocs(self) -> dict[str, list[dict[str, Any]]]:
        by_job: dict[str, list[dict[str, Any]]] = {}
        for alloc in self.nomad.get("/v1/allocations", {"resources": "true"}) or []:
            by_job.setdefault(str(alloc.get("JobID")), []).append(alloc)
        return by_job

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
            nodes = self._nodes()
            jobs = self._jobs()
            allocs = self._allocs()
            cat = read_catalog(entries, self.layout, self.max_value_bytes)
            models, frozen, blocked = self._merge_catalog(cat)
            demand = self.demand_source.read([m.name for m in models], cat.demand, now)
            nodes, warnings = apply_reports(
                nodes, records_from_kv(entries, self.layout), layout=self.layout
            )
            holds, preempted = parse_state(entries, self.layout.holds)
        except (NomadError, ConsulError, DemandError) as exc:
            raise ReadFailed(str(exc)) from exc
        healthy = self._healthy({j.model for j in jobs if not j.stopped}, warnings)
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
        snapshot = Snapshot(
            now=now,
            settings=cat.settings or Settings(),
            nodes=nodes,
            models=models,
            quotas=sorted(cat.quotas.values(), key=lambda q: q.owner),
            demand={k: v for k, v in demand.items() if k in names},
            replicas=replicas,
            holds=holds,
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
        )
