"""Batch jobs as Nomad runs them: a task that exits. Its allocation completes (or fails), the
reconciler does not replace an allocation that completed, nor one that failed once its
reschedule policy is spent, and the job is `dead` once every allocation is terminal
(nomad/state/state_store.go getJobStatus; scheduler/reconciler filterByRescheduleable).

A stand-in batch task is a download (`hf download <repo> ...`, a prefetch): it runs for the
time the node's stand-in cache takes to download the weights, then fills the cache and
completes, or fails when the node has no cache or no room for them. Without stand-in caches
it completes at once. Functions of the Cluster (state.py), under its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.model_cache import model_source
from llm_scheduler_standins.nomad.effects import Effects

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster

BATCH = ("batch", "sysbatch")


def is_batch(alloc_or_job: dict[str, Any]) -> bool:
    return (alloc_or_job.get("JobType") or alloc_or_job.get("Type")) in BATCH


def run_task(cluster: Cluster, alloc: dict[str, Any], effects: Effects) -> None:
    """A batch allocation just started: its task exits after its work."""
    source = model_source(alloc["Job"], alloc["TaskGroup"])
    seconds = cluster.caches.download_s(alloc["NodeID"], source) if cluster.caches else 0.0
    effects.timers.append((alloc["ID"], seconds, cluster._task_exited))


def task_exited(cluster: Cluster, alloc_id: str) -> None:
    with cluster._lock:
        cluster._timers.pop(alloc_id, None)
        alloc = cluster._allocs.get(alloc_id)
        if alloc is None or alloc["ClientStatus"] != "running":
            return
        ok = True
        if cluster.caches is not None:
            source = model_source(alloc["Job"], alloc["TaskGroup"])
            ok = cluster.caches.fetched(alloc["NodeID"], source)
        effects = Effects()
        cluster._finish(alloc, "complete" if ok else "failed", effects)
        job = cluster._jobs.get((alloc["Namespace"], alloc["JobID"]))
        if job is not None:
            cluster._refresh_status(job)
            cluster._bump("jobs")
        cluster._apply(effects)


def keeps_slot(group: dict[str, Any], allocs: list[dict[str, Any]], slot_name: str) -> bool:
    """A batch slot whose allocation of the current version completed, or failed past its
    group's reschedule policy (attempts, unless unlimited), is not placed again."""
    ended = [a for a in allocs if a["Name"] == slot_name]
    if any(a["ClientStatus"] == "complete" for a in ended):
        return True
    failed = sum(1 for a in ended if a["ClientStatus"] in ("failed", "lost"))
    policy = group.get("ReschedulePolicy") or {}
    if not failed or policy.get("Unlimited"):
        return False
    return failed > int(policy.get("Attempts") or 0)


def dead(job: dict[str, Any], allocs: list[dict[str, Any]], blocked: bool) -> bool:
    """A batch job with allocations, all terminal, and nothing waiting to be placed."""
    return is_batch(job) and bool(allocs) and not blocked
