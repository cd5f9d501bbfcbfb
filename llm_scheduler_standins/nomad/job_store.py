"""Jobs: register (with CAS), deregister, listings, summaries, status, and evaluation GC.

Functions of the Cluster (state.py), under its lock.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.nomad import batch, deployments, gc, views
from llm_scheduler_standins.nomad.alloc_status import is_terminal
from llm_scheduler_standins.nomad.effects import Effects
from llm_scheduler_standins.nomad.job_validation import validate
from llm_scheduler_standins.nomad.jobs import canonicalize

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster


# Fields the server owns; a register that changes only these is not a new version.
_SERVER_FIELDS = (
    "Status",
    "StatusDescription",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Stable",
    "Stop",
)
# An allocation's ClientStatus -> its bin in the job summary (state_store.go
# updateSummaryWithAlloc).
_SUMMARY_BINS = {
    "pending": "Starting",
    "running": "Running",
    "complete": "Complete",
    "failed": "Failed",
    "lost": "Lost",
}
_SUMMARY_KEYS = ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")


class CasError(ValueError):
    """EnforceIndex / JobModifyIndex conflict: a 500 in Nomad."""


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k not in _SERVER_FIELDS}


def register(
    cluster: Cluster,
    raw_job: Any,
    *,
    enforce_index: bool = False,
    job_modify_index: int = 0,
    namespace: str | None = None,
) -> dict[str, Any]:
    job = canonicalize(raw_job, region=cluster.region)
    if namespace and not (raw_job or {}).get("Namespace"):
        job["Namespace"] = namespace
    validate(job)
    with cluster._lock:
        key = (job["Namespace"], job["ID"])
        existing = cluster._jobs.get(key)
        if enforce_index:
            cluster._check_cas(existing, job_modify_index)
        changed = existing is None or _spec(existing) != _spec(job) or existing["Stop"]
        if changed:
            index = cluster._bump("jobs")
            job["Version"] = existing["Version"] + 1 if existing else 0
            job["CreateIndex"] = existing["CreateIndex"] if existing else index
            job["ModifyIndex"] = job["JobModifyIndex"] = index
            job["SubmitTime"] = views.now_ns()
            job["Stop"] = False
            job["Status"] = "pending"
            cluster._jobs[key] = job
            cluster._job_event(job, "JobRegistered")
        elif existing is not None:
            job = existing
        effects = Effects()
        if changed:
            cluster._new_deployment(job, effects)
        evaluation = cluster._evaluate(job, "job-register", effects)
        cluster._refresh_status(job)
        if changed and existing is not None:
            effects.merge(cluster._unblock())  # the old version's devices may fit others
        eval_id = evaluation["ID"]
        response = {
            "EvalID": eval_id,
            "EvalCreateIndex": evaluation["CreateIndex"],
            "JobModifyIndex": job["JobModifyIndex"],
            "Warnings": "",
            "Index": evaluation["CreateIndex"],
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }
        cluster._apply(effects)
    return response


def check_cas(cluster: Cluster, existing: dict[str, Any] | None, want: int) -> None:
    if want == 0 and existing is not None:
        raise CasError("Enforcing job modify index 0: job already exists")
    if want != 0 and existing is None:
        raise CasError(f"Enforcing job modify index {want}: job does not exist")
    if existing is not None and existing["JobModifyIndex"] != want:
        raise CasError(
            f"Enforcing job modify index {want}: job exists with conflicting job modify"
            f" index: {existing['JobModifyIndex']}"
        )


def deregister(cluster: Cluster, namespace: str, job_id: str, *, purge: bool) -> dict[str, Any]:
    with cluster._lock:
        key = (namespace, job_id)
        job = cluster._jobs.get(key)
        if job is None:
            return {
                "EvalID": "",
                "EvalCreateIndex": 0,
                "JobModifyIndex": 0,
                "VolumeEvalID": "",
                "VolumeEvalIndex": 0,
            }
        index = cluster._bump("jobs")
        job["Stop"] = True
        cluster._cancel_deployments(job, deployments.JOB_STOPPED)
        cluster._job_event(job, "JobDeregistered")
        job["ModifyIndex"] = job["JobModifyIndex"] = index
        effects = Effects()
        evaluation = cluster._evaluate(job, "job-deregister", effects)
        if purge:
            del cluster._jobs[key]
        else:
            cluster._refresh_status(job)
        effects.merge(cluster._unblock())
        response = {
            "EvalID": evaluation["ID"],
            "EvalCreateIndex": evaluation["CreateIndex"],
            "JobModifyIndex": index,
            "VolumeEvalID": "",
            "VolumeEvalIndex": 0,
        }
        cluster._apply(effects)
    return response


def job(cluster: Cluster, namespace: str, job_id: str) -> dict[str, Any] | None:
    with cluster._lock:
        job = cluster._jobs.get((namespace, job_id))
        return views.jcopy(job) if job else None


def jobs(cluster: Cluster, namespace: str = "*") -> list[dict[str, Any]]:
    with cluster._lock:
        return [
            views.jcopy(j) for (ns, _), j in sorted(cluster._jobs.items()) if namespace in ("*", ns)
        ]


def job_stubs(
    cluster: Cluster, namespace: str = "*", prefix: str = "", *, meta: bool
) -> list[dict[str, Any]]:
    """GET /v1/jobs: one stub per job, built from the live state without copying whole
    jobs (a listing under churn must not cost every job's full spec)."""
    with cluster._lock:
        return [
            cluster._job_stub(j, meta=meta)
            for (ns, jid), j in sorted(cluster._jobs.items())
            if namespace in ("*", ns) and jid.startswith(prefix)
        ]


def job_summary(cluster: Cluster, namespace: str, job_id: str) -> dict[str, Any] | None:
    with cluster._lock:
        job = cluster._jobs.get((namespace, job_id))
        return None if job is None else cluster._summary(job)


def job_stub(cluster: Cluster, job: dict[str, Any], *, meta: bool) -> dict[str, Any]:
    with cluster._lock:
        return cluster._job_stub(job, meta=meta)


def stub_of(cluster: Cluster, job: dict[str, Any], *, meta: bool) -> dict[str, Any]:
    summary = cluster._summary(job)
    stub = {
        "ID": job["ID"],
        "ParentID": job.get("ParentID", ""),
        "Name": job["Name"],
        "Namespace": job["Namespace"],
        "Datacenters": views.jcopy(job["Datacenters"]),
        "NodePool": job["NodePool"],
        "Multiregion": None,
        "Type": job["Type"],
        "Priority": job["Priority"],
        "Periodic": False,
        "ParameterizedJob": False,
        "Stop": job["Stop"],
        "Status": job["Status"],
        "StatusDescription": job["StatusDescription"],
        "JobSummary": summary,
        "CreateIndex": job["CreateIndex"],
        "ModifyIndex": job["ModifyIndex"],
        "JobModifyIndex": job["JobModifyIndex"],
        "SubmitTime": job["SubmitTime"],
    }
    if meta:
        stub["Meta"] = views.jcopy(job.get("Meta"))
    return stub


def summary(cluster: Cluster, job: dict[str, Any]) -> dict[str, Any]:
    groups: dict[str, dict[str, int]] = {}
    for group in job["TaskGroups"]:
        groups[group["Name"]] = dict.fromkeys(_SUMMARY_KEYS, 0)
    for alloc in cluster._job_allocs(job):
        counts = groups.setdefault(alloc["TaskGroup"], dict.fromkeys(_SUMMARY_KEYS, 0))
        counts[_SUMMARY_BINS.get(alloc["ClientStatus"], "Unknown")] += 1
    for tg, bins in cluster._reaped.get((job["Namespace"], job["ID"]), {}).items():
        counts = groups.setdefault(tg, dict.fromkeys(_SUMMARY_KEYS, 0))
        for name, n in bins.items():
            counts[name] += n
    for evaluation in cluster._evals_of.get((job["Namespace"], job["ID"]), ()):
        if evaluation["Status"] == "blocked":
            for tg, queued in (evaluation.get("QueuedAllocations") or {}).items():
                if tg in groups:
                    groups[tg]["Queued"] = queued
    return {
        "JobID": job["ID"],
        "Namespace": job["Namespace"],
        "Summary": groups,
        "Children": {"Pending": 0, "Running": 0, "Dead": 0},
        "CreateIndex": job["CreateIndex"],
        "ModifyIndex": job["ModifyIndex"],
    }


def job_allocs(cluster: Cluster, job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(cluster._allocs_of.get((job["Namespace"], job["ID"]), ()))


def maybe_gc(cluster: Cluster) -> None:
    """Reap old terminal evaluations and allocations (gc.py), every eval_gc_interval_s."""
    now = time.monotonic()
    if now - cluster._last_gc < cluster.eval_gc_interval_s:
        return
    cluster._last_gc = now
    cutoff = views.now_ns() - int(cluster.eval_gc_threshold_s * 1e9)
    evals, allocs = gc.collectable(
        list(cluster._evals.values()), list(cluster._allocs.values()), cluster._jobs, cutoff
    )
    if not evals and not allocs:
        return
    for alloc_id in allocs:
        alloc = cluster._allocs.pop(alloc_id)
        key = (alloc["Namespace"], alloc["JobID"])
        cluster._allocs_of[key].remove(alloc)
        bins = cluster._reaped.setdefault(key, {}).setdefault(alloc["TaskGroup"], {})
        status = _SUMMARY_BINS.get(alloc["ClientStatus"], "Unknown")
        bins[status] = bins.get(status, 0) + 1
        for table in (cluster._check_status, cluster._health_deadline, cluster._maybe_live):
            table.pop(alloc_id, None)
    for eval_id in evals:
        evaluation = cluster._evals.pop(eval_id)
        cluster._evals_of[(evaluation["Namespace"], evaluation["JobID"])].remove(evaluation)
        cluster._maybe_blocked.pop(eval_id, None)
    cluster._bump("evals", "allocs")  # Eval.Reap is a Raft write


def live_allocs(cluster: Cluster) -> list[dict[str, Any]]:
    """Allocations not terminal, oldest first (what holds resources on the nodes)."""
    for alloc_id in [i for i, a in cluster._maybe_live.items() if is_terminal(a)]:
        del cluster._maybe_live[alloc_id]
    return list(cluster._maybe_live.values())


def refresh_status(cluster: Cluster, job: dict[str, Any]) -> None:
    allocs = cluster._job_allocs(job)
    live = [a for a in allocs if not is_terminal(a)]
    evals = cluster._evals_of.get((job["Namespace"], job["ID"]), [])
    blocked = any(e["Status"] == "blocked" for e in evals)
    if (job["Stop"] or batch.dead(job, allocs, blocked)) and not live:
        status = "dead"
    elif any(a["ClientStatus"] == "running" for a in live):
        status = "running"
    else:
        status = "pending"
    job["Status"] = status
