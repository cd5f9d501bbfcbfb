"""Merging what was read into the parts of a snapshot: the catalog with each key's last good
value, replicas from our jobs and their allocations, and where ready replicas serve."""

from __future__ import annotations

from typing import Any

from scheduler.adapters.catalog import Catalog
from scheduler.adapters.nomad_allocs import replica_from
from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.adapters.pass_memory import LastGood
from scheduler.core.models import Demand, Model, Replica
from scheduler.demand.signals import Target


def merge_catalog(cat: Catalog, last: LastGood) -> tuple[list[Model], set[str], set[str]]:
    """(models, frozen models, blocked owners). A bad model, quota, settings or demand value
    gives way to its last good one (`last`, updated here); a bad model freezes its replicas;
    a bad quota with no last good value blocks its owner."""
    frozen = set(cat.bad_models)
    models = dict(cat.models)
    for name in cat.bad_models:
        if name not in models and name in last.models:
            models[name] = last.models[name]
    last.models.update(cat.models)
    for name in list(last.models):
        if name not in models:
            del last.models[name]  # deleted by the operator: forget it
    quotas = dict(cat.quotas)
    blocked: set[str] = set()
    for owner in cat.bad_quotas:
        if owner in last.quotas:
            quotas[owner] = last.quotas[owner]
        else:
            blocked.add(owner)
    last.quotas = dict(quotas)
    cat.quotas = quotas
    if cat.settings is not None:
        last.settings = cat.settings
    cat.settings = last.settings
    for name in cat.bad_models:
        if name not in cat.demand and name in last.demand:
            cat.demand[name] = last.demand[name]
    last.demand = dict(cat.demand)
    return sorted(models.values(), key=lambda m: m.name), frozen, blocked


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


def replicas_of(
    jobs: list[OwnedJob],
    allocs: dict[str, list[dict[str, Any]]],
    healthy: set[str],
    demand: dict[str, Demand],
    preempted: dict[str, str],
) -> tuple[list[Replica], dict[str, OwnedJob], list[str]]:
    """(replicas, replica id -> its job, stopped job ids with no allocation left)."""
    replicas: list[Replica] = []
    by_replica: dict[str, OwnedJob] = {}
    purgeable: list[str] = []
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
    return replicas, by_replica, purgeable
