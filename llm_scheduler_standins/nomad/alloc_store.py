"""Allocations and evaluations: stopping and finishing allocations, service checks, reads.

Functions of the Cluster (state.py), under its lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.nomad import views
from llm_scheduler_standins.nomad.alloc_status import TERMINAL_CLIENT
from llm_scheduler_standins.nomad.effects import Effects
from llm_scheduler_standins.registry import CheckStatus

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster


def stop_alloc(
    cluster: Cluster,
    alloc: dict[str, Any],
    description: str,
    effects: Effects,
    client_status: str = "complete",
) -> None:
    alloc["DesiredStatus"] = "stop"
    alloc["DesiredDescription"] = description
    if cluster.stop_delay_s > 0 and alloc["ClientStatus"] == "running":
        # The client deregisters services first, then kills the tasks; the devices are
        # free for the scheduler as soon as the allocation is desired to stop.
        effects.deregister += cluster._services.pop(alloc["ID"], [])
        cluster._touch(alloc)
        effects.finish_later.append(alloc["ID"])
        return
    cluster._finish(alloc, client_status, effects)


def finish_stopped(cluster: Cluster, alloc_id: str) -> None:
    with cluster._lock:
        cluster._timers.pop(alloc_id, None)
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None or alloc["ClientStatus"] in TERMINAL_CLIENT:
            return
        effects = Effects()
        cluster._finish(alloc, "complete", effects)
        job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
        if job is not None:
            cluster._refresh_status(job)
            cluster._bump("jobs")
        cluster._apply(effects)


def finish(cluster: Cluster, alloc: dict[str, Any], client_status: str, effects: Effects) -> None:
    timer = cluster._timers.pop(alloc["ID"], None)
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
    cluster._touch(alloc)
    effects.deregister += cluster._services.pop(alloc["ID"], [])
    if cluster.model_servers is not None:
        cluster.model_servers.stop(alloc["ID"])


def stop_allocation(cluster: Cluster, alloc_id: str) -> dict[str, Any]:
    """POST /v1/allocation/<id>/stop: stop it; the job's evaluation places a replacement."""
    with cluster._lock:
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None:
            raise KeyError("alloc not found")
        effects = Effects()
        cluster._stop_alloc(alloc, "alloc was stopped by user", effects)
        job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
        evaluation = (
            cluster._evaluate(job, "alloc-stop", effects) if job and not job["Stop"] else None
        )
        effects.merge(cluster._unblock())
        index = cluster._index
        cluster._apply(effects)
    return {"EvalID": evaluation["ID"] if evaluation else "", "Index": index}


def fail_allocation(cluster: Cluster, alloc_id: str, *, reschedule: bool = True) -> str | None:
    """Mark an allocation failed (its tasks died); optionally place a replacement."""
    with cluster._lock:
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None:
            raise KeyError(f"alloc not found: {alloc_id}")
        effects = Effects()
        cluster._finish(alloc, "failed", effects)
        alloc["DesiredStatus"] = "stop" if not reschedule else alloc["DesiredStatus"]
        job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
        replacement: str | None = None
        if reschedule and job is not None and not job["Stop"]:
            before = set(cluster._allocs)
            cluster._evaluate(job, "alloc-failure", effects)
            new = [a for a in cluster._allocs if a not in before]
            if new:
                replacement = new[0]
                alloc["NextAllocation"] = replacement
                cluster._allocs[replacement]["PreviousAllocation"] = alloc_id
        if job is not None:
            cluster._refresh_status(job)
        effects.merge(cluster._unblock())
        cluster._apply(effects)
    return replacement


def set_service_check(cluster: Cluster, alloc_id: str, status: CheckStatus) -> None:
    with cluster._lock:
        cluster._check_status[alloc_id] = status
        if cluster.registry is not None:
            for service_id in cluster._services.get(alloc_id, []):
                cluster.registry.set_check_status(service_id, status)


def alloc(cluster: Cluster, alloc_id: str) -> dict[str, Any] | None:
    with cluster._lock:
        alloc = cluster._allocs.get(alloc_id)
        return views.jcopy(alloc) if alloc else None


def allocs(
    cluster: Cluster,
    *,
    namespace: str = "*",
    job_id: str | None = None,
    node_id: str | None = None,
    prefix: str = "",
) -> list[dict[str, Any]]:
    with cluster._lock:
        return views.jcopy(cluster._find_allocs(namespace, job_id, node_id, prefix))


def alloc_stubs(
    cluster: Cluster,
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
    with cluster._lock:
        return [
            views.alloc_stub(a, resources=resources, task_states=task_states)
            for a in cluster._find_allocs(namespace, job_id, None, prefix)
            if keep(a["Namespace"]) and eval_id in (None, a["EvalID"])
        ]


def find_allocs(
    cluster: Cluster, namespace: str, job_id: str | None, node_id: str | None, prefix: str
) -> list[dict[str, Any]]:
    """Newest first, as Nomad lists them."""
    if job_id is not None and namespace != "*":
        candidates: Any = cluster._allocs_of.get((namespace, job_id), ())
    else:
        candidates = cluster._allocs.values()
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


def evaluation(cluster: Cluster, eval_id: str) -> dict[str, Any] | None:
    with cluster._lock:
        evaluation = cluster._evals.get(eval_id)
        if evaluation is None:
            return None
        result = views.jcopy(evaluation)
        related = [
            e
            for e in cluster._evals.values()
            if e["ID"] in (evaluation["BlockedEval"], evaluation["PreviousEval"])
        ]
        result["RelatedEvals"] = [views.eval_stub(e) for e in related] or None
        return result


def evaluations(
    cluster: Cluster, *, namespace: str = "*", job_id: str | None = None
) -> list[dict[str, Any]]:
    with cluster._lock:
        if job_id is not None and namespace != "*":
            candidates: Any = cluster._evals_of.get((namespace, job_id), ())
        else:
            candidates = cluster._evals.values()
        found = [
            views.jcopy(e)
            for e in candidates
            if namespace in ("*", e["Namespace"]) and (job_id is None or e["JobID"] == job_id)
        ]
    found.sort(key=lambda e: e["CreateIndex"], reverse=True)
    return found
