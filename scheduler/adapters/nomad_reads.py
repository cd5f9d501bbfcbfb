"""Nomad's side of a snapshot: nodes, our jobs, allocations and what Nomad refused.

Each read remembers what it needs to skip the next one (a node or job whose modify index did
not move is not read again; a job the actuator registered is known without a read).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Any

from scheduler.adapters.nomad_allocs import alloc_devices, alloc_live, alloc_terminal
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.nomad_faults import RefusalMemory, refusal, short_allocation
from scheduler.adapters.nomad_jobs import (
    MODEL_META,
    REPLICA_META,
    OwnedJob,
    owned_job,
)
from scheduler.adapters.nomad_listings import LISTINGS, Listing, Listings
from scheduler.adapters.nomad_nodes import (
    Usage,
    alloc_usage,
    less_usage,
    node_from_nomad,
    shares_per_core,
)
from scheduler.adapters.prefetch_jobs import is_prefetch, prefetch_of
from scheduler.core.models import Node, Shard
from scheduler.core.prefetch_records import Prefetch


class NomadReader:
    """Reads Nomad's listings for one pass after another, keeping what spares a read."""

    def __init__(self, nomad: NomadAPI, listings: Listings | None = None) -> None:
        self.nomad = nomad
        # What the service's watches last fetched; none for one-shot commands (they read).
        self.listings = listings
        self.node_cache: dict[str, tuple[int, Node, float]] = {}  # id -> (index, node, MHz)
        self.refusals = RefusalMemory()
        self.job_cache: dict[str, tuple[int, OwnedJob | None]] = {}  # id -> (JobModifyIndex, job)
        self.prefetch_jobs: dict[str, dict[str, Any]] = {}  # id -> a prefetch job's ID and Meta
        # Registered by the actuator: id -> (JobModifyIndex, job, when).
        self._learned: dict[str, tuple[int, OwnedJob, float]] = {}
        self._learned_lock = threading.Lock()
        self._queued: dict[str, bool] = {}  # job id -> its summary has allocations queued
        self.listed: list[str] = []  # every job id the last listing named, ours or not
        # Per-node and per-job reads, a few at a time: under churn a slow Nomad would
        # otherwise cost one round trip per changed object, in series, in every pass.
        self._details = ThreadPoolExecutor(8, "nomad-read")

    def listing(self, name: str, asked_after: float) -> Listing:
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

    def nodes(self, usage: dict[str, Usage], listing: Listing, now: datetime) -> list[Node]:
        """Nodes less their reserved resources, what other allocations hold on them, and the
        devices Nomad refused lately (see RefusalMemory)."""
        stubs = listing.body
        listed: dict[str, int] = {}
        for stub in stubs or []:
            listed[str(stub["ID"])] = int(stub.get("ModifyIndex") or 0)
        stale = [
            nid
            for nid, mod in listed.items()
            if nid not in self.node_cache or self.node_cache[nid][0] != mod or mod == 0
        ]
        bodies = self._details.map(lambda nid: self.nomad.get(f"/v1/node/{nid}"), stale)
        for nid, body in zip(stale, bodies, strict=True):
            mhz = shares_per_core(body.get("NodeResources") or {})
            self.node_cache[nid] = (listed[nid], node_from_nomad(body), mhz)
        nodes = [
            less_usage(self.node_cache[nid][1], usage.get(nid), self.node_cache[nid][2])
            for nid in listed
        ]
        for gone in self.node_cache.keys() - listed.keys():
            del self.node_cache[gone]  # a node that left the cluster
        return self.refusals.apply(sorted(nodes, key=lambda n: n.id), now)

    def jobs(self, listing: Listing) -> list[OwnedJob]:
        """Our jobs. A job's spec is read only when its JobModifyIndex moved (status changes
        do not move it), and not when the actuator registered it at that index, nor when it was
        only stopped (Stop set, the same model and replica in its Meta)."""
        out = []
        self.listed = []
        stale: dict[str, int] = {}
        stops: dict[str, bool] = {}
        with self._learned_lock:
            learned = dict(self._learned)
        for stub in listing.body or []:
            jid = str(stub["ID"])
            mod = int(stub.get("JobModifyIndex") or stub.get("ModifyIndex") or 0)
            stopped = bool(stub.get("Stop")) or stub.get("Status") == "dead"
            self.listed.append(jid)
            self._queued[jid] = _queued(stub)
            stops[jid] = stopped
            cached = self.job_cache.get(jid)
            if jid in learned and learned[jid][0] == mod:
                self.job_cache[jid] = (mod, learned[jid][1])
            elif cached is not None and cached[0] == mod and mod != 0:
                continue
            elif stopped and _same_replica(cached, stub.get("Meta")):
                self.job_cache[jid] = (mod, cached[1])  # type: ignore[index]
            else:
                stale[jid] = mod
        # Changed jobs are read a few at a time: under churn a slow Nomad would otherwise
        # cost one round trip per changed job, in series, in every pass.
        bodies = dict(zip(stale, self._details.map(self.nomad.job_or_none, stale), strict=True))
        for jid, mod in stale.items():
            body = bodies[jid]
            self.job_cache[jid] = (mod, owned_job(body) if body else None)
            if body and is_prefetch(body):
                self.prefetch_jobs[jid] = {"ID": jid, "Meta": body.get("Meta")}
        for jid in self.listed:
            owned = self.job_cache[jid][1]
            if owned is not None:
                # Stop and status come with every listing; the spec from the cache.
                stopped = stops[jid] or owned.stopped
                out.append(owned if owned.stopped == stopped else replace(owned, stopped=stopped))
        for gone in self.job_cache.keys() - set(self.listed):
            del self.job_cache[gone]  # a purged job: forget it
            self.prefetch_jobs.pop(gone, None)
        self._queued = {j: q for j, q in self._queued.items() if j in self.job_cache}
        # A registered job this listing does not show yet waits for the next one (a while).
        listed, too_old = set(self.listed), time.monotonic() - 300
        with self._learned_lock:
            for jid in [j for j, v in self._learned.items() if j in listed or v[2] < too_old]:
                del self._learned[jid]
        return out

    def prefetches(
        self, listing: Listing, allocs: dict[str, list[dict[str, Any]]]
    ) -> list[Prefetch]:
        """The prefetch jobs of the last job listing, with the state of their allocations
        (`allocs`: by job id, as `allocations` gives them when asked for these ids too)."""
        stubs = {str(s["ID"]): s for s in listing.body or []}
        found = []
        for jid, known in sorted(self.prefetch_jobs.items()):
            stub = stubs.get(jid)
            if stub is not None:
                job = {**known, "Stop": stub.get("Stop"), "Status": stub.get("Status")}
                prefetch = prefetch_of(job, allocs.get(jid, []))
                if prefetch is not None:
                    found.append(prefetch)
        return found

    def allocations(
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

    def faults(
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
