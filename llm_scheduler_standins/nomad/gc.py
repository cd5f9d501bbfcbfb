"""Evaluation garbage collection, as Nomad's core scheduler does it (nomad/core_sched.go
evalGC, gcEval, allocGCEligible): every `eval_gc_interval` (5 min), terminal evaluations
older than `eval_gc_threshold` (1 h) go, with those of their allocations that are terminal,
old, not running on a client and not waiting to be rescheduled. An evaluation with an
allocation that cannot go yet stays. Batch jobs' evaluations (a 24 h threshold and rules of
their own) are left alone: the stand-in serves services.
"""

from __future__ import annotations

from typing import Any

EVAL_GC_THRESHOLD_S = 3600.0
EVAL_GC_INTERVAL_S = 300.0
TERMINAL_EVAL = {"complete", "failed", "canceled"}
_TERMINAL_CLIENT = {"complete", "failed", "lost"}


def _alloc_collectable(alloc: dict[str, Any], job: dict[str, Any] | None, cutoff_ns: int) -> bool:
    """core_sched.go allocGCEligible, without reschedule policies: a failed allocation of a
    live job with no replacement yet might still be rescheduled, so it stays."""
    terminal = alloc["DesiredStatus"] in ("stop", "evict") or alloc["ClientStatus"] in (
        _TERMINAL_CLIENT
    )
    if not terminal or alloc["ModifyTime"] > cutoff_ns or alloc["ClientStatus"] == "running":
        return False
    if job is None or job["Stop"] or job["Status"] == "dead":
        return True
    if alloc["DesiredStatus"] == "stop" or alloc["ClientStatus"] != "failed":
        return True
    return bool(alloc.get("NextAllocation"))


def collectable(
    evals: list[dict[str, Any]],
    allocs: list[dict[str, Any]],
    jobs: dict[tuple[str, str], dict[str, Any]],
    cutoff_ns: int,
) -> tuple[list[str], list[str]]:
    """(evaluation ids, allocation ids) that may be reaped: core_sched.go evalGC/gcEval."""
    by_eval: dict[str, list[dict[str, Any]]] = {}
    for alloc in allocs:
        by_eval.setdefault(alloc["EvalID"], []).append(alloc)
    gone_evals: list[str] = []
    gone_allocs: list[str] = []
    for evaluation in evals:
        if evaluation["Type"] in ("batch", "sysbatch"):
            continue
        if evaluation["Status"] not in TERMINAL_EVAL or evaluation["ModifyTime"] > cutoff_ns:
            continue
        job = jobs.get((evaluation["Namespace"], evaluation["JobID"]))
        whole = True
        for alloc in by_eval.get(evaluation["ID"], []):
            if _alloc_collectable(alloc, job, cutoff_ns):
                gone_allocs.append(alloc["ID"])
            else:
                whole = False
        if whole:
            gone_evals.append(evaluation["ID"])
    return gone_evals, gone_allocs
