"""The scheduler: an evaluation reconciles a job's allocations with its spec and places what
is missing (placement.py), or blocks until something frees up.

Functions of the Cluster (state.py), under its lock.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.fleet_model import parse_ports
from llm_scheduler_standins.nomad import batch, deployments
from llm_scheduler_standins.nomad import views as json_views
from llm_scheduler_standins.nomad.alloc_status import ALLOC_NOT_NEEDED, is_terminal
from llm_scheduler_standins.nomad.allocs import build_alloc, service_instances
from llm_scheduler_standins.nomad.effects import Effects
from llm_scheduler_standins.nomad.fingerprint import DeviceGroup
from llm_scheduler_standins.nomad.nodes import MHZ_PER_CORE, NodeRecord
from llm_scheduler_standins.nomad.placement import Metrics, NodeView, claim, place

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster


def fingerprint(
    cluster: Cluster, record: NodeRecord
) -> tuple[dict[str, str], dict[str, str], list[DeviceGroup]]:
    """A node's attributes, meta and device groups for placement, made once per node and
    device health (they change with nothing else; placement only reads them)."""
    health = tuple(sorted(record.health.items()))
    cached = cluster._fingerprints.get(record.node.id)
    if cached is None or cached[0] != health:
        cached = (health, record.attributes(), record.meta(), record.groups())
        cluster._fingerprints[record.node.id] = cached
    return cached[1], cached[2], cached[3]


def node_views(cluster: Cluster) -> list[NodeView]:
    result = []
    for record in sorted(cluster._nodes.values(), key=lambda r: r.node.name):
        attributes, meta, groups = cluster._fingerprint(record)
        view = NodeView(
            node=record.node,
            node_class=record.node_class,
            status=record.status,
            eligible=record.eligible,
            region=cluster.region,
            attributes=attributes,
            meta=meta,
            groups=groups,
            cpu_shares=int(record.node.cpu_cores) * MHZ_PER_CORE,
            mhz_per_core=MHZ_PER_CORE,
            memory_mb=int(record.node.memory_gb * 1024),
            # Nomad's scheduler subtracts the node's ReservedResources from what it offers.
            used_shares=record.reserved_cpu_shares,
            used_memory_mb=record.reserved_memory_mb,
            used_ports=parse_ports(record.reserved_ports),
        )
        result.append(view)
    by_id = {v.node.id: v for v in result}
    for alloc in cluster._live_allocs():
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


def evaluate(
    cluster: Cluster,
    job: dict[str, Any],
    triggered_by: str,
    effects: Effects,
    evaluation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Reconcile a job's allocations with its spec; returns the evaluation."""
    index = cluster._bump("evals")
    if evaluation is None:
        evaluation = json_views.empty_eval(str(uuid.uuid4()), job, triggered_by, index)
        cluster._add_eval(evaluation)
        # A new evaluation supersedes the job's blocked one.
        for other in cluster._evals_of[(job["Namespace"], job["ID"])]:
            if other["Status"] == "blocked":
                other["Status"] = "canceled"
                other["StatusDescription"] = "evaluation superseded by a newer one"
                other["ModifyIndex"] = index
    failures = cluster._reconcile(job, evaluation, effects)
    queued = {tg: n for tg, (_, n) in failures.items()}
    evaluation["QueuedAllocations"] = {
        g["Name"]: queued.get(g["Name"], 0) for g in job["TaskGroups"]
    }
    evaluation["ModifyIndex"] = index
    evaluation["ModifyTime"] = json_views.now_ns()
    evaluation["JobModifyIndex"] = job["JobModifyIndex"]
    failed = {tg: m.to_json() for tg, (m, _) in failures.items()} or None
    if evaluation["Status"] == "blocked":
        evaluation["FailedTGAllocs"] = failed
        if not failures:
            evaluation["Status"] = "complete"
            evaluation["StatusDescription"] = ""
        cluster._eval_event(evaluation)
        return evaluation
    evaluation["FailedTGAllocs"] = failed
    if failures:
        blocked = json_views.empty_eval(str(uuid.uuid4()), job, "queued-allocs", index)
        blocked.update(
            Status="blocked",
            StatusDescription="created to place remaining allocations",
            PreviousEval=evaluation["ID"],
            FailedTGAllocs=json_views.jcopy(failed),
            QueuedAllocations=json_views.jcopy(evaluation["QueuedAllocations"]),
        )
        cluster._add_eval(blocked)
        evaluation["BlockedEval"] = blocked["ID"]
        cluster._eval_event(blocked)
    cluster._eval_event(evaluation)
    return evaluation


def reconcile(
    cluster: Cluster, job: dict[str, Any], evaluation: dict[str, Any], effects: Effects
) -> dict[str, tuple[Metrics, int]]:
    groups = {g["Name"]: g for g in job["TaskGroups"]}
    live_by_group: dict[str, list[dict[str, Any]]] = {}
    for alloc in cluster._job_allocs(job):
        if is_terminal(alloc):
            continue
        group = groups.get(alloc["TaskGroup"])
        if job["Stop"] or group is None or alloc["JobVersion"] != job["Version"]:
            cluster._stop_alloc(alloc, ALLOC_NOT_NEEDED, effects)
            continue
        live_by_group.setdefault(alloc["TaskGroup"], []).append(alloc)
    failures: dict[str, tuple[Metrics, int]] = {}
    if job["Stop"]:
        return failures
    node_views = cluster._views()
    if job["Type"] in ("system", "sysbatch"):
        cluster._reconcile_system(job, groups, live_by_group, node_views, evaluation, effects)
        return failures
    for name, group in groups.items():
        live = sorted(live_by_group.get(name, []), key=lambda a: a["Name"])
        for extra in live[group["Count"] :]:
            cluster._stop_alloc(extra, ALLOC_NOT_NEEDED, effects)
        used_names = {a["Name"] for a in live[: group["Count"]]}
        missing = [i for i in range(group["Count"]) if f"{job['ID']}.{name}[{i}]" not in used_names]
        if batch.is_batch(job):
            ended = [
                a
                for a in cluster._job_allocs(job)
                if is_terminal(a) and a["TaskGroup"] == name and a["JobVersion"] == job["Version"]
            ]
            missing = [
                i for i in missing if not batch.keeps_slot(group, ended, f"{job['ID']}.{name}[{i}]")
            ]
        for position, slot in enumerate(missing):
            result = place(
                node_views, job, group, cluster._rng, short_devices=cluster.short_devices
            )
            if isinstance(result, Metrics):
                result.coalesced_failures = len(missing) - position - 1
                failures[name] = (result, len(missing) - position)
                break
            claim(result, job["ID"], name)
            cluster._add_alloc(
                build_alloc(job, group, slot, result, evaluation["ID"], cluster._bump("allocs")),
                effects,
            )
    return failures


def reconcile_system(
    cluster: Cluster,
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
            result = place([view], job, group, cluster._rng)
            if isinstance(result, Metrics):
                continue
            claim(result, job["ID"], name)
            cluster._add_alloc(
                build_alloc(job, group, 0, result, evaluation["ID"], cluster._bump("allocs")),
                effects,
            )


def unblock(cluster: Cluster) -> Effects:
    """Room may have appeared: run blocked evaluations again."""
    effects = Effects()
    for evaluation in list(cluster._maybe_blocked.values()):
        if evaluation["Status"] != "blocked":
            del cluster._maybe_blocked[evaluation["ID"]]
            continue
        job = cluster._jobs.get((evaluation["Namespace"], evaluation["JobID"]))
        if job is None or job["Stop"]:
            evaluation["Status"] = "canceled"
            evaluation["ModifyIndex"] = cluster._bump("evals")
            continue
        cluster._evaluate(job, "queued-allocs", effects, evaluation)
        cluster._refresh_status(job)
    return effects


def add_eval(cluster: Cluster, evaluation: dict[str, Any]) -> None:
    cluster._evals[evaluation["ID"]] = evaluation
    key = (evaluation["Namespace"], evaluation["JobID"])
    cluster._evals_of.setdefault(key, []).append(evaluation)
    if evaluation["Status"] == "blocked":
        cluster._maybe_blocked[evaluation["ID"]] = evaluation


def add_alloc(cluster: Cluster, alloc: dict[str, Any], effects: Effects) -> None:
    dep = cluster._active_deployment(alloc["Namespace"], alloc["JobID"])
    if dep is not None and alloc["TaskGroup"] in dep["TaskGroups"]:
        alloc["DeploymentID"] = dep["ID"]
        dep["TaskGroups"][alloc["TaskGroup"]]["PlacedAllocs"] += 1
    cluster._allocs[alloc["ID"]] = alloc
    cluster._allocs_of.setdefault((alloc["Namespace"], alloc["JobID"]), []).append(alloc)
    if not is_terminal(alloc):
        cluster._maybe_live[alloc["ID"]] = alloc
    cluster._alloc_event(alloc)
    effects.start_later.append(alloc["ID"])


def touch(cluster: Cluster, alloc: dict[str, Any]) -> None:
    alloc["ModifyIndex"] = cluster._bump("allocs")
    alloc["ModifyTime"] = json_views.now_ns()
    cluster._alloc_event(alloc)


def start_alloc(cluster: Cluster, alloc_id: str) -> None:
    effects = Effects()
    with cluster._lock:
        cluster._timers.pop(alloc_id, None)
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None or is_terminal(alloc) or alloc["ClientStatus"] != "pending":
            return
        started = json_views.rfc3339_now()
        for state in alloc["TaskStates"].values():
            state["State"] = "running"
            state["StartedAt"] = started
            state["Events"] += [
                json_views.task_event("Task Setup", "Building Task Directory"),
                json_views.task_event("Driver", "", "Downloading image"),
                json_views.task_event("Started", "", "Task started by client"),
            ]
        alloc["ClientStatus"] = "running"
        alloc["ClientDescription"] = "Tasks are running"
        cluster._serve_model(alloc)
        cluster._touch(alloc)
        cluster._check_status[alloc_id] = cluster.initial_check
        job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
        group = next(
            (g for g in (job or alloc["Job"])["TaskGroups"] if g["Name"] == alloc["TaskGroup"]),
            None,
        )
        if cluster.health_time_scale <= 0 or group is None:
            cluster._set_health(alloc, True, effects)
        else:
            min_healthy, deadline = deployments.health_params(alloc["Job"], group)
            scale = cluster.health_time_scale
            cluster._health_deadline[alloc_id] = time.monotonic() + deadline * scale
            effects.timers.append((f"health:{alloc_id}", min_healthy * scale, cluster._health_tick))
        if batch.is_batch(alloc):
            batch.run_task(cluster, alloc, effects)
        effects.register = service_instances(
            alloc, cluster._nodes[alloc["NodeID"]], cluster.initial_check
        )
        cluster._services[alloc_id] = [s.id for s in effects.register]
        if job is not None:
            cluster._refresh_status(job)
            cluster._bump("jobs")
        cluster._apply(effects)
