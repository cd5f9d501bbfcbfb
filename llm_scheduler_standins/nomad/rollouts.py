"""Deployments and allocation health: min_healthy_time, healthy_deadline, progress_deadline,
and the stand-in model server of each running allocation that serves HTTP.

Functions of the Cluster (state.py), under its lock.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.nomad import deployments as deployment_rules
from llm_scheduler_standins.nomad import views
from llm_scheduler_standins.nomad.alloc_status import is_terminal
from llm_scheduler_standins.nomad.effects import Effects

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster


def active_deployment(cluster: Cluster, namespace: str, job_id: str) -> dict[str, Any] | None:
    found = [
        d for d in cluster._deployments_of.get((namespace, job_id), ()) if d["Status"] == "running"
    ]
    return max(found, key=lambda d: d["CreateIndex"]) if found else None


def cancel_deployments(cluster: Cluster, job: dict[str, Any], why: str) -> None:
    while (dep := cluster._active_deployment(job["Namespace"], job["ID"])) is not None:
        cluster._end_deployment(dep, "cancelled", why)


def end_deployment(cluster: Cluster, dep: dict[str, Any], status: str, why: str) -> None:
    dep["Status"], dep["StatusDescription"] = status, why
    dep["ModifyIndex"] = cluster._bump("deployments")
    dep["ModifyTime"] = views.now_ns()


def new_deployment(cluster: Cluster, job: dict[str, Any], effects: Effects) -> None:
    """A new job version of a service job with an update strategy is a deployment."""
    cluster._cancel_deployments(job, deployment_rules.NEWER_JOB)
    if job["Stop"] or not any(deployment_rules.deploys(job, g) for g in job["TaskGroups"]):
        return
    dep = deployment_rules.new_deployment(str(uuid.uuid4()), job, cluster._bump("deployments"))
    cluster._deployments[dep["ID"]] = dep
    cluster._deployments_of.setdefault((dep["Namespace"], dep["JobID"]), []).append(dep)
    progress = deployment_rules.progress_deadline_s(job)
    if progress > 0 and cluster.health_time_scale > 0:
        cluster._progress_at[dep["ID"]] = time.monotonic()
        effects.timers.append(
            (f"deploy:{dep['ID']}", progress * cluster.health_time_scale, cluster._progress_check)
        )


def set_health(cluster: Cluster, alloc: dict[str, Any], healthy: bool, effects: Effects) -> None:
    cluster._touch(alloc)
    alloc["DeploymentStatus"] = deployment_rules.health_status(healthy, alloc["ModifyIndex"])
    dep = cluster._deployments.get(alloc.get("DeploymentID") or "")
    if dep is None or dep["Status"] != "running":
        return
    state = dep["TaskGroups"].get(alloc["TaskGroup"])
    if state is None:
        return
    state["HealthyAllocs" if healthy else "UnhealthyAllocs"] += 1
    dep["ModifyIndex"] = cluster._bump("deployments")
    if healthy:
        cluster._progress_at[dep["ID"]] = time.monotonic()
        if all(s["HealthyAllocs"] >= s["DesiredTotal"] for s in dep["TaskGroups"].values()):
            cluster._end_deployment(dep, "successful", deployment_rules.SUCCESSFUL)
        return
    # deploymentwatcher: an unhealthy allocation of an active deployment is replaced.
    job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
    cluster._stop_alloc(alloc, deployment_rules.RESCHEDULED, effects)
    if job is not None and not job["Stop"]:
        before = set(cluster._allocs)
        cluster._evaluate(job, "deployment-watcher", effects)
        new = [a for a in cluster._allocs if a not in before]
        if new:
            alloc["NextAllocation"] = new[0]
            cluster._allocs[new[0]]["PreviousAllocation"] = alloc["ID"]
        cluster._refresh_status(job)


def health_tick(cluster: Cluster, key: str) -> None:
    """The client's health watcher: healthy once checks pass, unhealthy at the deadline."""
    alloc_id = key.split(":", 1)[1]
    with cluster._lock:
        cluster._timers.pop(key, None)
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None or is_terminal(alloc) or alloc["ClientStatus"] != "running":
            return
        effects = Effects()
        deadline = cluster._health_deadline.get(alloc_id, 0.0)
        if cluster._check_status.get(alloc_id) == "passing":
            cluster._set_health(alloc, True, effects)
        elif time.monotonic() >= deadline:
            cluster._set_health(alloc, False, effects)
        else:
            step = min(0.05, max(deadline - time.monotonic(), 0.001))
            effects.timers.append((key, step, cluster._health_tick))
        cluster._apply(effects)


def progress_check(cluster: Cluster, key: str) -> None:
    dep_id = key.split(":", 1)[1]
    with cluster._lock:
        cluster._timers.pop(key, None)
        dep = cluster._deployments.get(dep_id)
        job = cluster._jobs.get((dep["Namespace"], dep["JobID"])) if dep else None
        if dep is None or job is None or dep["Status"] != "running":
            return
        window = deployment_rules.progress_deadline_s(job) * cluster.health_time_scale
        left = cluster._progress_at.get(dep_id, 0.0) + window - time.monotonic()
        effects = Effects()
        if left <= 0:
            cluster._end_deployment(dep, "failed", deployment_rules.PROGRESS_DEADLINE)
        else:
            effects.timers.append((key, left, cluster._progress_check))
        cluster._apply(effects)


def list_deployments(
    cluster: Cluster, *, namespace: str, job_id: str | None = None
) -> list[dict[str, Any]]:
    with cluster._lock:
        found = [
            views.jcopy(d)
            for d in cluster._deployments.values()
            if namespace in ("*", d["Namespace"]) and job_id in (None, d["JobID"])
        ]
    found.sort(key=lambda d: d["CreateIndex"], reverse=True)
    return found


def get_deployment(cluster: Cluster, dep_id: str) -> dict[str, Any] | None:
    with cluster._lock:
        dep = cluster._deployments.get(dep_id)
        return views.jcopy(dep) if dep else None


def serve_model(cluster: Cluster, alloc: dict[str, Any]) -> None:
    """Start a stand-in model server for an allocation whose group has an `http` port and a
    service (a multi-node replica's head). Every stand-in server listens on loopback, so the
    allocation reports 127.0.0.1 and the port actually bound, where Nomad would report the
    node's address and the port it picked."""
    if cluster.model_servers is None:
        return
    shared = alloc["AllocatedResources"]["Shared"]
    http = next((p for p in shared.get("Ports") or [] if p.get("Label") == "http"), None)
    group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
    services = group.get("Services") or [s for t in group["Tasks"] for s in t.get("Services") or []]
    if http is None or not services:
        return
    # The scheduler's job Meta names the model (its served name); else the job id.
    model = str((alloc["Job"].get("Meta") or {}).get("llm_scheduler_model") or alloc["JobID"])
    configs = json.dumps([t.get("Config") for t in group["Tasks"]], default=str)
    runtime = "sglang" if "sglang" in configs else "vllm"
    port = cluster.model_servers.start(alloc["ID"], model, runtime)
    http["Value"], http["HostIP"] = port, "127.0.0.1"
    for net in shared.get("Networks") or []:
        net["IP"] = "127.0.0.1"
        for dyn in net.get("DynamicPorts") or []:
            if dyn.get("Label") == "http":
                dyn["Value"] = port
