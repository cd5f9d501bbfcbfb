"""Update strategies, allocation health and deployments, as Nomad applies them.

A service job without an update block of its own gets Nomad's default one (api/jobs.go
DefaultUpdateStrategy: max_parallel 1, health from checks, min_healthy_time 10s,
healthy_deadline 5m, progress_deadline 10m), so every new version is a deployment. A task
group whose update block has max_parallel 0 has none (structs.UpdateStrategy.IsEmpty).
An allocation's health comes from its checks: healthy once they pass for min_healthy_time,
unhealthy if that has not happened by healthy_deadline (client/allocrunner/health_hook.go),
taken from the update block in a deployment and from the migrate block otherwise. In a
running deployment an unhealthy allocation is replaced (nomad/deploymentwatcher
allowReplacements); a deployment without progress by its progress deadline fails.
"""

from __future__ import annotations

from typing import Any

from llm_scheduler_standins.nomad import views

SECOND = 1_000_000_000
MIGRATE_DEFAULTS = {"MinHealthyTime": 10 * SECOND, "HealthyDeadline": 300 * SECOND}
RUNNING = "Deployment is running"
SUCCESSFUL = "Deployment completed successfully"
PROGRESS_DEADLINE = "Failed due to progress deadline"
NEWER_JOB = "Cancelled due to newer version of job"
JOB_STOPPED = "Cancelled because job is stopped"
RESCHEDULED = "alloc was rescheduled because it failed"


def group_update(job: dict[str, Any], group: dict[str, Any]) -> dict[str, Any] | None:
    """The group's update strategy: the job's, with the group's own fields over it."""
    if job.get("Type") != "service":
        return None
    merged = dict(job.get("Update") or {})
    merged.update({k: v for k, v in (group.get("Update") or {}).items() if v is not None})
    return merged or None


def deploys(job: dict[str, Any], group: dict[str, Any]) -> bool:
    update = group_update(job, group)
    return update is not None and int(update.get("MaxParallel") or 0) > 0


def health_params(job: dict[str, Any], group: dict[str, Any]) -> tuple[float, float]:
    """(min_healthy_time, healthy_deadline) in seconds: the update block's in a deployment,
    else the migrate block's (getHealthParams)."""
    if deploys(job, group):
        block = group_update(job, group) or {}
    else:
        block = {**MIGRATE_DEFAULTS, **(job.get("Migrate") or {}), **(group.get("Migrate") or {})}
    min_healthy = int(block.get("MinHealthyTime") or MIGRATE_DEFAULTS["MinHealthyTime"])
    deadline = int(block.get("HealthyDeadline") or MIGRATE_DEFAULTS["HealthyDeadline"])
    return min_healthy / SECOND, deadline / SECOND


def progress_deadline_s(job: dict[str, Any]) -> float:
    """The shortest progress deadline of the job's deploying groups (0: none)."""
    deadlines = [
        int((group_update(job, g) or {}).get("ProgressDeadline") or 0) / SECOND
        for g in job["TaskGroups"]
        if deploys(job, g)
    ]
    return min(deadlines) if deadlines else 0.0


def new_deployment(dep_id: str, job: dict[str, Any], index: int) -> dict[str, Any]:
    now = views.now_ns()
    groups = {}
    for group in job["TaskGroups"]:
        if not deploys(job, group):
            continue
        update = group_update(job, group) or {}
        groups[group["Name"]] = {
            "AutoRevert": bool(update.get("AutoRevert")),
            "AutoPromote": bool(update.get("AutoPromote")),
            "ProgressDeadline": int(update.get("ProgressDeadline") or 0),
            "RequireProgressBy": None,
            "Promoted": False,
            "PlacedCanaries": None,
            "DesiredCanaries": int(update.get("Canary") or 0),
            "DesiredTotal": int(group["Count"]),
            "PlacedAllocs": 0,
            "HealthyAllocs": 0,
            "UnhealthyAllocs": 0,
        }
    return {
        "ID": dep_id,
        "Namespace": job["Namespace"],
        "JobID": job["ID"],
        "JobVersion": job["Version"],
        "JobModifyIndex": job["JobModifyIndex"],
        "JobSpecModifyIndex": job["JobModifyIndex"],
        "JobCreateIndex": job["CreateIndex"],
        "IsMultiregion": False,
        "TaskGroups": groups,
        "Status": "running",
        "StatusDescription": RUNNING,
        "EvalPriority": job["Priority"],
        "CreateIndex": index,
        "ModifyIndex": index,
        "CreateTime": now,
        "ModifyTime": now,
    }


def health_status(healthy: bool, index: int) -> dict[str, Any]:
    return {
        "Canary": False,
        "Healthy": healthy,
        "ModifyIndex": index,
        "Timestamp": views.rfc3339_now(),
    }
