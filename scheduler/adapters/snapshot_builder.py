"""Build the decision core's Snapshot from Nomad and Consul, in one pass of reads.

Any read that fails raises ReadFailed: the service then acts on nothing (no partial data).
Bad operator input is not a read failure: it becomes error lines, and the last good value
of that key (if this process saw one) stands in for it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from pydantic import AwareDatetime, BaseModel, ValidationError

from scheduler.adapters.catalog import Catalog, read_catalog
from scheduler.adapters.consul_kv import (
    FILTERED_HEADER,
    ConsulClient,
    ConsulError,
    kv_read,
    passing_allocs_of,
)
from scheduler.adapters.gpu_reports import apply_reports, records_from_kv
from scheduler.adapters.json_bounds import bounded_loads
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_faults import RefusalMemory, refusal, short_allocation
from scheduler.adapters.nomad_jobs import (
    MODEL_META,
    REPLICA_META,
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

log = structlog.get_logger("llm-scheduler.snapshot")


HEALTH_UNREADABLE = "health unreadable"


class ReadFailed(Exception):
    """Nomad, Consul or the demand source could not be read; nothing may be decided."""


# The Nomad listings a snapshot is made of. The service's watches ask exactly these, so that a
# pass can take what a watch last fetched instead of asking again (see Listings).
NODES = "nomad-nodes"
JOBS = "nomad-jobs"
ALLOCATIONS = "nomad-allocations"
LISTINGS: dict[str, tuple[str, dict[str, str]]] = {
    NODES: ("/v1/nodes", {}),
    # meta: each stub carries its job's Meta (Nomad 1.7+; older servers leave it out), so a
    # job that was only stopped needs no second read.
    JOBS: ("/v1/jobs", {"prefix": "llm-", "meta": "true"}),
    ALLOCATIONS: (
        "/v1/allocations",
        {"resources": "true", "namespace": "*", "task_states": "false"},
    ),
}


@dataclass(frozen=True)
class Listing:
    """One listing as Nomad answered it: body, X-Nomad-Index, and when it was asked for."""

    body: Any
    index: int
    asked_at: float  # time.monotonic() when the request went out
    got_at: float  # ... and when the answer came


class Listings:
    """The latest answer of each Nomad watch (a blocking query on a listing).

    A watch is answered as soon as its listing changes and asks again at once, so its latest
    answer is the listing as Nomad has it, short of a change on its way back, which wakes
    another pass anyway. A pass that takes it saves a round trip and Nomad the work of
    answering twice: under churn, and with a slow Nomad, that is most of a pass. A watch that
    failed forgets its answer, and one whose question has been open longer than `max_age_s`
    (its HTTP timeout: a hung connection) is not used: the pass reads.
    """

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._latest: dict[str, Listing] = {}
        self._asking: dict[str, float] = {}  # name -> when its open question went out

    def asking(self, name: str, since: float) -> None:
        with self._lock:
            self._asking[name] = since

    def put(self, name: str, listing: Listing) -> None:
        with self._lock:
            self._latest[name] = listing

    def forget(self, name: str) -> None:
        with self._lock:
            self._latest.pop(name, None)

    def fresh(self, name: str, asked_after: float) -> Listing | None:
        """The latest answer, unless it is too old or was asked for before `asked_after`."""
        with self._lock:
            listing = self._latest.get(name)
            open_since = self._asking.get(name, 0.0)
        if listing is None or listing.asked_at < asked_after:
            return None
        if time.monotonic() - max(open_since, listing.got_at) > self.max_age_s:
            return None
        return listing


@dataclass
class Gone:
    """What went missing and since when; kept in the state key so a restart remembers it."""

    models: dict[str, datetime] = field(default_factory=dict)  # model key deleted
    demand: dict[str, tuple[datetime, Demand]] = field(default_factory=dict)  # demand key deleted

    def to_json(self) -> dict[str, Any]:
        return {
            # Full precision: a grace of seconds must not start up to a second early.
            "models": {k: v.isoformat() for k, v in sorted(self.models.items())},
            "demand": {
                k: {"since": t.isoformat(), "last": d.model_dump(mode="json")}
                for k, (t, d) in sorted(self.demand.items())
            },
        }


class _GoneDemand(BaseModel):
    since: AwareDatetime
    last: Demand


def _parse_gone(data: Any) -> Gone:
    gone = Gone()
    if not isinstance(data, dict):
        return gone
    for name, since in (data.get("models") or {}).items():
        try:
            gone.models[str(name)] = datetime.fromisoformat(str(since))
        except ValueError:
            continue
    for name, value in (data.get("demand") or {}).items():
        try:
            item = _GoneDemand.model_validate(value)
        except ValidationError:
            continue
        gone.demand[str(name)] = (item.since, item.last)
    return gone


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
    gone: Gone = field(default_factory=Gone)  # what went missing, for the state key
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


def parse_state(
    entries: list[dict[str, Any]], key: str
) -> tuple[dict[str, Hold], dict[str, str], Gone]:
    """(holds, replica -> model it was preempted for, what went missing) from the state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    if not raw:
        return {}, {}, Gone()
    try:
        data = bounded_loads(raw, 1 << 20)
        holds = {k: Hold.model_validate(v) for k, v in (data.get("holds") or {}).items()}
        preempted = {str(k): str(v) for k, v in (data.get("preempted") or {}).items()}
        return holds, preempted, _parse_gone(data.get("gone"))
    except (ValueError, TypeError, AttributeError):
        return {}, {}, Gone()  # our own key; a bad value only loses holds


def parse_lifecycle(
    entries: list[dict[str, Any]], key: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(failed roll-outs: model -> spec digest, moves: replica -> replacement) from the
    scheduler's state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    try:
        data = bounded_loads(raw, 1 << 20) if raw else {}
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
        listings: Listings | None = None,
    ) -> None:
        self.nomad = nomad
        # What the service's watches last fetched; none for one-shot commands (they read).
        self.listings = listings
        self.consul = consul_client
        self.layout = layout
        self.demand_source: DemandSource = demand_source or KVDemandSource()
        self.max_value_bytes = max_value_bytes
        self._last = _LastGood()
        self._node_cache: dict[str, tuple[int, Node, float]] = {}  # id -> (index, node, MHz)
        self.refusals = RefusalMemory()
        self._job_cache: dict[str, tuple[int, OwnedJob | None]] = {}  # id -> (JobModifyIndex, job)
        # Registered by the actuator: id -> (JobModifyIndex, job, when).
        self._learned: dict[str, tuple[int, OwnedJob, float]] = {}
        self._learned_lock = threading.Lock()
        self._queued: dict[str, bool] = {}  # job id -> its summary has allocations queued
        self._last_health: dict[str, set[str]] = {}
        self._listed: list[str] = []
        # Issue 18: the servers' signals, the last time each model's servers had work, and
        # each model's recent desired counts (handed back to the core for stabilisation).
        self.signal_source = signal_source
        self._seen: dict[str, datetime] = {}
        self._marks: dict[str, list[DesiredMark]] = {}
        self.last_signals = Signals()
        self._gone = Gone()
        # Per-node and per-job reads, a few at a time: under churn a slow Nomad would
        # otherwise cost one round trip per changed object, in series, in every pass.
        self._details = ThreadPoolExecutor(8, "nomad-read")
        self._seen_demand: dict[str, Demand] = {}  # the demand keys of the last read
        # The latest pass carried over since the last build (issue 15): its snapshot, plan
        # and when it ran; its scale-down marks are recorded by the next build.
        self._carried: tuple[Snapshot, Plan, datetime] | None = None

    # ------------------------------------------------------------------ reads

    def _list(self, name: str, asked_after: float) -> Listing:
        """A listing of LISTINGS: a watch's latest answer when there is a fresh one asked for
        after `asked_after`, else read now."""
        if self.listings is not None:
            cached = self.listings.fresh(name, asked_after)
            if cached is not None:
                return cached
        path, params = LISTINGS[name]
        asked = time.monotonic()
        body, index = self.nomad.read(path, params)
        return Listing(body, index, asked, time.monotonic())

    def learn(self, body: dict[str, Any], job_modify_index: int) -> None:
        """A job the actuator registered, at the JobModifyIndex Nomad answered: the listing
        that shows it at that index needs no read of it (Nomad stores what it was sent)."""
        owned = owned_job(body)
        if owned is not None and job_modify_index > 0:
            with self._learned_lock:
                self._learned[owned.job_id] = (job_modify_index, owned, time.monotonic())

    def _nodes(self, usage: dict[str, Usage], listing: Listing) -> list[Node]:
        """Nodes less their reserved resources and what other allocations hold on them."""
        stubs = listing.body
        listed: dict[str, int] = {}
        for stub in stubs or []:
            listed[str(stub["ID"])] = int(stub.get("ModifyIndex") or 0)
        stale = [
            nid
            for nid, mod in listed.items()
            if nid not in self._node_cache or self._node_cache[nid][0] != mod or mod == 0
        ]
        bodies = self._details.map(lambda nid: self.nomad.get(f"/v1/node/{nid}"), stale)
        for nid, body in zip(stale, bodies, strict=True):
            mhz = shares_per_core(body.get("NodeResources") or {})
            self._node_cache[nid] = (listed[nid], node_from_nomad(body), mhz)
        nodes = [
            less_usage(self._node_cache[nid][1], usage.get(nid), self._node_cache[nid][2])
            for nid in listed
        ]
        for gone in self._node_cache.keys() - listed.keys():
            del self._node_cache[gone]  # a node that left the cluster
        return sorted(nodes, key=lambda n: n.id)

    def _jobs(self, listing: Listing) -> list[OwnedJob]:
        """Our jobs. A job's spec is read only when its JobModifyIndex moved (status changes
        do not move it), and not when the actuator registered it at that index, nor when it was
        only stopped (Stop set, the same model and replica in its Meta)."""
        out = []
        self._listed = []
        stale: dict[str, int] = {}
        stops: dict[str, bool] = {}
        with self._learned_lock:
            learned = dict(self._learned)
        for stub in listing.body or []:
            jid = str(stub["ID"])
            mod = int(stub.get("JobModifyIndex") or stub.get("ModifyIndex") or 0)
            stopped = bool(stub.get("Stop")) or stub.get("Status") == "dead"
            self._listed.append(jid)
            self._queued[jid] = _queued(stub)
            stops[jid] = stopped
            cached = self._job_cache.get(jid)
            if jid in learned and learned[jid][0] == mod:
                self._job_cache[jid] = (mod, learned[jid][1])
            elif cached is not None and cached[0] == mod and mod != 0:
                continue
            elif stopped and _same_replica(cached, stub.get("Meta")):
                self._job_cache[jid] = (mod, cached[1])  # type: ignore[index]
            else:
                stale[jid] = mod
        # Changed jobs are read a few at a time: under churn a slow Nomad would otherwise
        # cost one round trip per changed job, in series, in every pass.
        bodies = dict(zip(stale, self._details.map(self.nomad.job_or_none, stale), strict=True))
        for jid, mod in stale.items():
            body = bodies[jid]
            self._job_cache[jid] = (mod, owned_job(body) if body else None)
        for jid in self._listed:
            owned = self._job_cache[jid][1]
            if owned is not None:
                # Stop and status come with every listing; the spec from the cache.
                stopped = stops[jid] or owned.stopped
                out.append(owned if owned.stopped == stopped else replace(owned, stopped=stopped))
        for gone in self._job_cache.keys() - set(self._listed):
            del self._job_cache[gone]  # a purged job: forget it
        self._queued = {j: q for j, q in self._queued.items() if j in self._job_cache}
        # A registered job this listing does not show yet waits for the next one (a while).
        listed, too_old = set(self._listed), time.monotonic() - 300
        with self._learned_lock:
            for jid in [j for j, v in self._learned.items() if j in listed or v[2] < too_old]:
                del self._learned[jid]
        return out

    def _allocs(
        self, ours: set[str], listing: Listing
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Usage]]:
        """One listing of every namespace's allocations (read-job wherever they may be):
        our jobs' allocations by job id, and per node what the others hold."""
        own_ns = self.nomad.namespace or "default"
        by_job: dict[str, list[dict[str, Any]]] = {}
        usage: dict[str, Usage] = {}
        for alloc in listing.body or []:
            jid = str(alloc.get("JobID"))
            if alloc.get("Namespace", "default") == own_ns and jid in ours:
                by_job.setdefault(jid, []).append(alloc)
            elif not alloc_terminal(alloc):
                alloc_usage(alloc, usage.setdefault(str(alloc.get("NodeID")), Usage()))
        return by_job, usage

    def _faults(
        self, jobs: list[OwnedJob], allocs: dict[str, list[dict[str, Any]]], now: datetime
    ) -> tuple[dict[str, str], bool]:
        """Replicas Nomad failed. Evaluations are read only for our jobs with no allocation
        (placement pending or refused), so a steady cluster costs no extra reads, and only when
        the job's summary has allocations queued (a refused placement leaves them there;
        nomad/state/state_store.go nestedUpsertEval) or the listing carries no summary.
        Also whether any evaluation was read (no watch covers them)."""
        faults: dict[str, str] = {}
        ask: list[OwnedJob] = []
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
            if self._queued.get(job.job_id, True):
                ask.append(job)
        # A few at a time: under churn many new jobs may wait for their allocations at once.
        answers = self._details.map(
            lambda j: self.nomad.get(f"/v1/job/{j.job_id}/evaluations"), ask
        )
        for job, evaluations in zip(ask, answers, strict=True):
            refused = refusal(evaluations)
            if refused is not None:
                why, devices_only = refused
                faults[job.replica] = f"placement refused by Nomad: {why}"
                self.refusals.remember(job.wish, devices_only, now)
        return faults, bool(ask)

    def remember(self, snapshot: Snapshot, plan: Plan) -> None:
        """Keep each model's desired count of this pass for the next passes' scale-down window."""
        self._record_carried()
        self._remember(snapshot, plan)

    def remember_carried(self, snapshot: Snapshot, plan: Plan, at: datetime) -> None:
        """A pass carried over at `at` asked what `plan` asks (the same plan). Only the latest
        such pass is recorded, and only when the marks are next needed: the marks of earlier
        carried passes have the same counts and are older, so within any window that holds
        one of them the latest one stands for it, and the full pass before them (whose mark
        was kept) is older still, so the window is watched whole as early as with all of them.
        Constant time per carried pass, instead of one mark per model."""
        self._carried = (snapshot, plan, at)

    def _record_carried(self) -> None:
        if self._carried is not None:
            snapshot, plan, at = self._carried
            self._carried = None
            self._remember(snapshot.model_copy(update={"now": at}), plan)

    def expires(self, snapshot: Snapshot) -> datetime | None:
        """When what the builder carries by itself next runs out after the snapshot's now: a
        deleted demand key's last value (kept for eviction_grace_s), a spot Nomad refused
        (held for a while). A pass carried over must not outlive it (a build would differ)."""
        grace = timedelta(seconds=snapshot.settings.eviction_grace_s)
        ends = [since + grace for since, _ in self._gone.demand.values()]
        ends += self.refusals.ends()
        return min((t for t in ends if t > snapshot.now), default=None)

    def _remember(self, snapshot: Snapshot, plan: Plan) -> None:
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

    def _track_gone(
        self,
        cat: Catalog,
        models: list[Model],
        saved: Gone,
        running: set[str],
        now: datetime,
        has_state: bool,
    ) -> dict[str, datetime]:
        """Remember what went missing; carry a deleted demand key's last value for
        eviction_grace_s; list models whose key was deleted while replicas of theirs run."""
        for name, since in saved.models.items():
            self._gone.models[name] = min(since, self._gone.models.get(name, since))
        for name, (since, last) in saved.demand.items():
            if name not in self._gone.demand or since < self._gone.demand[name][0]:
                self._gone.demand[name] = (since, last)
        known = {m.name for m in models} | cat.bad_models
        # Demand: missing is not zero.
        seen = dict(cat.demand)
        grace = (cat.settings or Settings()).eviction_grace_s
        for name in list(self._gone.demand):
            if name in seen or name not in known:
                del self._gone.demand[name]
        for name in sorted(known - seen.keys()):
            if name not in self._gone.demand and name in self._seen_demand:
                self._gone.demand[name] = (now, self._seen_demand[name])
            if name in self._gone.demand:
                since, last = self._gone.demand[name]
                if (now - since).total_seconds() < grace:
                    cat.demand[name] = last
        self._seen_demand = seen
        # Models: a deleted key retires the model, after retire_grace_s (in the core).
        for name in list(self._gone.models):
            if name in known or name not in running:
                del self._gone.models[name]  # back, or nothing of it left
        if not known and not has_state:
            # No model key and no state key of ours while replicas run: a wiped Consul or a
            # wrong prefix, not an operator retiring models; retire nothing.
            return {}
        for name in sorted(running - known):
            if name not in self._gone.models:
                self._gone.models[name] = now
                log.warning("model_retiring", model=name, reason="its key was deleted")
        return dict(self._gone.models)

    def build(self, now: datetime, asked_after: float = 0.0) -> ClusterView:
        """The snapshot as of now. A watch's listing asked for before `asked_after` (a
        time.monotonic()) is not used: the caller needs something that happened since."""
        started = time.monotonic()
        self._record_carried()  # before recent_desired is handed out below
        try:
            # The KV listing and Nomad's three listings are independent: read them side by
            # side (a slow Nomad costs one round trip, not three in a row).
            with ThreadPoolExecutor(4, "snapshot-read") as pool:
                listing = pool.submit(self._listing)
                allocs_listing = pool.submit(self._list, ALLOCATIONS, asked_after)
                nodes_listing = pool.submit(self._list, NODES, asked_after)
                jobs_listing = self._list(JOBS, asked_after)
                jobs = self._jobs(jobs_listing)
                allocs_read = allocs_listing.result()
                allocs, usage = self._allocs({j.job_id for j in jobs}, allocs_read)
                nodes_read = nodes_listing.result()
                kv_index, entries = listing.result()
            faults, evaluated = self._faults(jobs, allocs, now)
            nodes = self.refusals.apply(self._nodes(usage, nodes_read), now)
            cat = read_catalog(entries, self.layout, self.max_value_bytes)
            models, frozen, blocked = self._merge_catalog(cat)
            holds, preempted, saved = parse_state(entries, self.layout.holds)
            running = {j.model for j in jobs if not j.stopped}
            has_state = any(e.get("Key") == self.layout.holds for e in entries)
            retired = self._track_gone(cat, models, saved, running, now, has_state)
            demand = self.demand_source.read([m.name for m in models], cat.demand, now)
            nodes, warnings = apply_reports(
                nodes, records_from_kv(entries, self.layout), layout=self.layout
            )
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
            retired=retired,
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
            gone=Gone(dict(self._gone.models), dict(self._gone.demand)),
            jobs_asked_at=jobs_listing.asked_at,
            jobs_index=jobs_listing.index,
            # A listing asked for before this build began is a watch's answer.
            from_watches=any(x.asked_at < started for x in (jobs_listing, allocs_read, nodes_read)),
            complete=not evaluated and not any(w.startswith(HEALTH_UNREADABLE) for w in warnings),
        )


def _same_replica(cached: tuple[int, OwnedJob | None] | None, meta: Any) -> bool:
    """The listing's Meta names the replica the cached spec is of (a job only stopped)."""
    if cached is None or cached[1] is None or not isinstance(meta, dict):
        return False
    return meta.get(MODEL_META) == cached[1].model and meta.get(REPLICA_META) == cached[1].replica


def _queued(stub: dict[str, Any]) -> bool:
    """The stub's JobSummary has allocations queued, or the listing carries no summary."""
    summary = (stub.get("JobSummary") or {}).get("Summary")
    if not isinstance(summary, dict):
        return True
    counts = [(g or {}).get("Queued") if isinstance(g, dict) else None for g in summary.values()]
    return any(not isinstance(n, int) or n > 0 for n in counts)
