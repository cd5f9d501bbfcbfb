"""Build the decision core's Snapshot from Nomad and Consul, in one pass of reads.

Any read that fails raises ReadFailed: the service then acts on nothing (no partial data).
Bad operator input is not a read failure: it becomes error lines, and the last good value
of that key (if this process saw one) stands in for it.

Nomad's reads are in `nomad_reads.py`, merging in `snapshot_merge.py`, and what is kept from
one pass to the next in `pass_memory.py`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from scheduler.adapters.catalog import GENERAL, Catalog, read_catalog, warn_unknown_gpu_models
from scheduler.adapters.consul_kv import (
    FILTERED_HEADER,
    ConsulClient,
    ConsulError,
    kv_read,
    passing_allocs_of,
)
from scheduler.adapters.gpu_reports import apply_reports, records_from_kv
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_jobs import OwnedJob, live_profiles, service_name, specs_of
from scheduler.adapters.nomad_listings import ALLOCATIONS, JOBS, NODES, Listing, Listings
from scheduler.adapters.nomad_nodes import Usage
from scheduler.adapters.nomad_reads import NomadReader
from scheduler.adapters.pass_memory import (
    Gone,
    PassMemory,
    parse_lifecycle,
    parse_reservations,
    parse_state,
)
from scheduler.adapters.ready_state import time_to_ready_problems
from scheduler.adapters.snapshot_merge import (
    merge_catalog,
    refused_rollouts,
    replicas_of,
    scrape_targets,
)
from scheduler.adapters.usage_state import UsageRead, parse_usage
from scheduler.core.models import (
    Demand,
    Hold,
    Load,
    Model,
    Node,
    Plan,
    Reservation,
    Settings,
    Snapshot,
)
from scheduler.demand import DemandError, DemandSource
from scheduler.demand.kv import KVDemandSource
from scheduler.demand.signals import Signals, SignalSource, combine

HEALTH_UNREADABLE = "health unreadable"
V = TypeVar("V")


class ReadFailed(Exception):
    """Nomad, Consul or the demand source could not be read; nothing may be decided."""


@dataclass(frozen=True)
class ClusterView:
    """One pass's reading of the cluster: the snapshot the core decides on, and what the
    service needs besides it (the actuator gets only its part, service/work.py; status
    writing its own, service/status_report.py)."""

    snapshot: Snapshot
    jobs: dict[str, OwnedJob]  # replica id -> its job
    purgeable: list[str]  # stopped job ids with no allocation left
    catalog: Catalog
    frozen_models: set[str]  # bad model/demand value: keep their replicas, stop nothing
    blocked_owners: set[str]  # bad quota with no last good value: start nothing under it
    warnings: list[str] = field(default_factory=list)
    preempted: dict[str, str] = field(default_factory=dict)  # replica -> model, from KV state
    # The scheduler's own keys as read (its state key and status records): what the status
    # writer compares its next records with.
    own_entries: list[dict[str, Any]] = field(default_factory=list)
    job_ids: set[str] = field(default_factory=set)  # every job id Nomad listed, ours or not
    # Replicas Nomad failed (placement refused, devices short) -> why: stopped and reported.
    faults: dict[str, str] = field(default_factory=dict)
    gone: Gone = field(default_factory=Gone)  # what went missing, for the state key
    usage: UsageRead = field(default_factory=UsageRead)  # the usage key as read (rule F4)
    # The job listing this view was made from: when it was asked for (time.monotonic()) and
    # its X-Nomad-Index. Registers and stops finished before the one, or written at or below
    # the other, show in it (the actuator's overlay stops adding them).
    jobs_asked_at: float = 0.0
    jobs_index: int = 0
    # Some listing came from a watch's latest answer rather than a read made by this build.
    from_watches: bool = False
    # Every read answered (Consul health too, whose last answer otherwise stands in), and none
    # of a kind no watch covers (a job's evaluations, read while it has no allocation).
    complete: bool = True

    @property
    def input_errors(self) -> list[str]:
        return self.catalog.all_errors()


@dataclass
class _Reads:
    """The four listings of one build, as read side by side."""

    jobs_listing: Listing
    allocs_listing: Listing
    nodes_listing: Listing
    jobs: list[OwnedJob]
    allocs: dict[str, list[dict[str, Any]]]
    usage: dict[str, Usage]
    kv_index: int
    entries: list[dict[str, Any]]

    def asked_before(self, started: float) -> bool:
        """Some listing was asked for before `started`: it is a watch's answer."""
        listings = (self.jobs_listing, self.allocs_listing, self.nodes_listing)
        return any(x.asked_at < started for x in listings)


@dataclass
class _KVSide:
    """The catalog and the scheduler's state as read from KV, merged with what was kept."""

    catalog: Catalog
    models: list[Model]
    frozen: set[str]  # bad model/demand value: keep their replicas, stop nothing
    blocked: set[str]  # bad quota with no last good value: start nothing under it
    holds: dict[str, Hold]
    reservations: dict[str, list[Reservation]]
    preempted: dict[str, str]
    retired: dict[str, datetime]
    removed_profiles: dict[str, dict[str, datetime]]
    stalled: dict[str, str]
    moves: dict[str, str]
    usage: UsageRead

    def remembered(self) -> dict[str, Any]:
        """What the scheduler's state key carried over, as the snapshot takes it."""
        return {
            "holds": self.holds,
            "reservations": self.reservations,
            "moves": self.moves,
            "retired": self.retired,
        }


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
        listings: Listings | None = None,
    ) -> None:
        self.nomad = nomad
        self.reader = NomadReader(nomad, listings)
        self.memory = PassMemory()
        self.consul = consul_client
        self.layout = layout
        self.demand_source: DemandSource = demand_source or KVDemandSource()
        self.max_value_bytes = max_value_bytes
        self._last_health: dict[str, set[str]] = {}
        # The servers' signals, of which the core gets the load and when each model's servers
        # last had work.
        self.signal_source = signal_source
        self.last_signals = Signals()

    @property
    def listings(self) -> Listings | None:
        """What the service's watches last fetched; none for one-shot commands (they read)."""
        return self.reader.listings

    def learn(self, body: dict[str, Any], job_modify_index: int) -> None:
        """A job the actuator registered, at the JobModifyIndex Nomad answered."""
        self.reader.learn(body, job_modify_index)

    def remember(self, snapshot: Snapshot, plan: Plan) -> None:
        """Keep each model's desired count of this pass for the next passes' scale-down window."""
        self.memory.remember(snapshot, plan)

    def remember_carried(self, snapshot: Snapshot, plan: Plan, at: datetime) -> None:
        """A pass carried over at `at` asked what `plan` asks (see PassMemory)."""
        self.memory.remember_carried(snapshot, plan, at)

    def expires(self, snapshot: Snapshot) -> datetime | None:
        """When what the builder carries by itself next runs out after the snapshot's now: a
        deleted demand key's last value (kept for eviction_grace_s), a spot Nomad refused
        (held for a while). A pass carried over must not outlive it (a build would differ)."""
        return self.memory.expires(snapshot, self.reader.refusals.ends())

    def _healthy(self, models: set[str], warnings: list[str]) -> set[str]:
        """Allocation ids passing their Consul checks. Unreadable health keeps the last answer:
        readiness only ever delays what a replica may be used for, so stale is safe."""
        healthy: set[str] = set()
        names = {model: service_name(model) for model in models}
        try:
            passing = passing_allocs_of(self.consul, set(names.values()))
            for model, name in names.items():
                self._last_health[model] = passing.get(name, set())
        except ConsulError as exc:
            warnings.append(f"{HEALTH_UNREADABLE}: {exc}")
        for model in models:
            healthy |= self._last_health.get(model, set())
        for gone in self._last_health.keys() - models:
            del self._last_health[gone]
        return healthy

    def _listing(self) -> tuple[int, list[dict[str, Any]]]:
        """The whole prefix in one read. When Consul filtered it by ACLs, ask each prefix the
        decision reads: one of them filtered means a partial catalog, which is unknown data,
        so nothing is decided (deleted keys and hidden keys look the same in a listing)."""
        listing = kv_read(self.consul, self.layout.prefix)
        if listing.filtered:
            for prefix in (
                self.layout.models,
                self.layout.quotas,
                self.layout.demand,
                self.layout.gateways,
                self.layout.settings,
                self.layout.nodes,
                self.layout.holds,
            ):
                if kv_read(self.consul, prefix).filtered:
                    raise ConsulError(
                        f"read {prefix}: Consul filtered the listing by ACLs "
                        f"({FILTERED_HEADER}); the token must be able to read every key there"
                    )
        return listing.index, listing.entries

    def _kv(
        self,
        entries: list[dict[str, Any]],
        jobs: list[OwnedJob],
        now: datetime,
    ) -> _KVSide:
        held = live_profiles(jobs)
        cat = read_catalog(entries, self.layout, self.max_value_bytes)
        models, frozen, blocked = merge_catalog(cat, self.memory.last)
        cat.demand = self.memory.gateway_demand.merge(
            cat.demand, cat.gateways, cat.bad_gateways, now,
            (cat.settings or Settings()).eviction_grace_s,
        )  # fmt: skip
        state_problems: list[str] = []
        holds, preempted, saved = parse_state(entries, self.layout.holds, state_problems)
        state_problems += time_to_ready_problems(entries, self.layout.time_to_ready)
        usage = parse_usage(entries, self.layout.usage, state_problems)
        kept = parse_reservations(entries, self.layout.holds, state_problems)
        for line in state_problems:
            cat.error(GENERAL, line)
        has_state = any(e.get("Key") == self.layout.holds for e in entries)
        retired = self.memory.track_gone(cat, models, saved, {m for m, _ in held}, now, has_state)
        removed = self.memory.track_profiles(models, saved, held, now)
        stalled, moves = parse_lifecycle(entries, self.layout.holds)
        return _KVSide(
            cat,
            models,
            frozen,
            blocked,
            holds,
            kept,
            preempted,
            retired,
            removed,
            stalled,
            moves,
            usage,
        )

    def _reported(
        self, nodes: list[Node], entries: list[dict[str, Any]], cat: Catalog, models: list[Model]
    ) -> tuple[list[Node], list[str]]:
        """The nodes with what their GPU reporters say (health, MIG layout, cached models), and
        the warnings of reading the reports; the catalog's unknown GPU models are reported."""
        nodes, warnings = apply_reports(
            nodes,
            records_from_kv(entries, self.layout),
            layout=self.layout,
            sources={m.serve.source for m in models if m.serve is not None},
        )
        warn_unknown_gpu_models(cat, models, nodes, self.layout)
        return nodes, warnings

    def _read(self, asked_after: float) -> _Reads:
        """The KV listing and Nomad's three listings, read side by side: they are independent,
        and a slow Nomad then costs one round trip, not three in a row."""
        with ThreadPoolExecutor(4, "snapshot-read") as pool:
            listing = pool.submit(self._listing)
            allocs_listing = pool.submit(self.reader.listing, ALLOCATIONS, asked_after)
            nodes_listing = pool.submit(self.reader.listing, NODES, asked_after)
            jobs_listing = self.reader.listing(JOBS, asked_after)
            jobs = self.reader.jobs(jobs_listing)
            allocs_read = allocs_listing.result()
            # Prefetch jobs are the core's to count (rules PF1-PF3): not others' usage.
            ours = {j.job_id for j in jobs} | set(self.reader.prefetch_jobs)
            allocs, usage = self.reader.allocations(ours, allocs_read)
            nodes_read = nodes_listing.result()
            kv_index, entries = listing.result()
        return _Reads(jobs_listing, allocs_read, nodes_read, jobs, allocs, usage, kv_index, entries)

    def _signals(
        self,
        reads: _Reads,
        healthy: set[str],
        models: list[Model],
        demand: dict[str, Demand],
        now: datetime,
        cat: Catalog,
    ) -> tuple[dict[str, Demand], dict[str, Load]]:
        """Demand combined with the servers' signals, and their load (none without a source)."""
        if self.signal_source is None:
            return demand, {}
        targets = scrape_targets(reads.jobs, reads.allocs, healthy)
        try:
            sig = self.signal_source.read_signals(sorted(m.name for m in models), targets, now)
        except DemandError as exc:
            raise ReadFailed(str(exc)) from exc
        seen = self.memory.seen
        for name, at in sig.seen.items():
            seen[name] = max(at, seen.get(name, at))
        sig.seen = {m.name: seen[m.name] for m in models if m.name in seen}
        for line in sig.errors:  # a broken reading: reported and counted as bad input
            cat.error(GENERAL, line)
        self.last_signals = sig
        return combine(demand, sig), sig.load

    def build(self, now: datetime, asked_after: float = 0.0) -> ClusterView:
        """The snapshot as of now. A watch's listing asked for before `asked_after` (a
        time.monotonic()) is not used: the caller needs something that happened since."""
        started = time.monotonic()
        self.memory.record_carried()  # before recent_desired is handed out below
        try:
            reads = self._read(asked_after)
            jobs, allocs, entries = reads.jobs, reads.allocs, reads.entries
            faults, evaluated = self.reader.faults(jobs, allocs, now)
            nodes = self.reader.nodes(reads.usage, reads.nodes_listing, now)
            kv = self._kv(entries, jobs, now)
            cat, models = kv.catalog, kv.models
            demand = self.demand_source.read([m.name for m in models], cat.demand, now)
            nodes, warnings = self._reported(nodes, entries, cat, models)
        except (NomadError, ConsulError, DemandError) as exc:
            raise ReadFailed(str(exc)) from exc
        healthy = self._healthy({model for model, _ in live_profiles(jobs)}, warnings)
        demand, load = self._signals(reads, healthy, models, demand, now, cat)
        replicas, by_replica, purgeable = replicas_of(jobs, allocs, healthy, demand, kv.preempted)
        specs = specs_of([m for m in models if m.serve is not None])
        stalled = {**kv.stalled, **refused_rollouts(jobs, faults, specs)}
        names = {m.name for m in models}
        snapshot = Snapshot(
            now=now,
            settings=cat.settings or Settings(),
            nodes=nodes,
            models=models,
            quotas=sorted(cat.quotas.values(), key=lambda q: q.owner),
            demand=_only(demand, names),
            replicas=replicas,
            specs=specs,
            stalled=stalled,
            load=_only(load, names),
            recent_desired=_only(self.memory.marks, names),
            **kv.remembered(),
            prefetches=self.reader.prefetches(reads.jobs_listing, allocs),
            usage=kv.usage.usage,
            removed_profiles=_only(kv.removed_profiles, names),
        )
        return ClusterView(
            snapshot=snapshot,
            jobs=by_replica,
            purgeable=purgeable,
            catalog=cat,
            frozen_models=kv.frozen,
            blocked_owners=kv.blocked,
            warnings=warnings,
            preempted=kv.preempted,
            own_entries=[e for e in entries if self.layout.written_by_scheduler(str(e.get("Key")))],
            job_ids=set(self.reader.listed),
            faults=faults,
            gone=self.memory.gone.copy(),
            usage=kv.usage,
            jobs_asked_at=reads.jobs_listing.asked_at,
            jobs_index=reads.jobs_listing.index,
            from_watches=reads.asked_before(started),
            complete=not evaluated and not any(w.startswith(HEALTH_UNREADABLE) for w in warnings),
        )


def _only(values: dict[str, V], names: set[str]) -> dict[str, V]:
    return {k: v for k, v in values.items() if k in names}
