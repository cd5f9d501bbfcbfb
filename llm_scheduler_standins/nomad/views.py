"""JSON shapes of allocations, evaluations and task states as the Nomad API returns them."""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import Any

_STUB_KEYS = (
    "ID",
    "EvalID",
    "Name",
    "Namespace",
    "NodeID",
    "NodeName",
    "JobID",
    "JobType",
    "JobVersion",
    "TaskGroup",
    "DesiredStatus",
    "DesiredDescription",
    "DesiredTransition",
    "ClientStatus",
    "ClientDescription",
    "TaskStates",
    "DeploymentStatus",
    "FollowupEvalID",
    "NextAllocation",
    "PreviousAllocation",
    "RescheduleTracker",
    "PreemptedAllocations",
    "PreemptedByAllocation",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
)


def now_ns() -> int:
    return time.time_ns()


def rfc3339(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_now() -> str:
    return rfc3339(datetime.now(UTC))


def task_event(kind: str, message: str = "", display: str = "") -> dict[str, Any]:
    return {
        "Type": kind,
        "Time": now_ns(),
        "DisplayMessage": display or message,
        "Details": {"message": message} if message else {},
        "Message": message,
        "FailsTask": False,
        "RestartReason": "",
        "SetupError": "",
        "DriverError": "",
        "DriverMessage": "",
        "ExitCode": 0,
        "Signal": 0,
        "KillTimeout": 0,
        "KillError": "",
        "KillReason": "",
        "StartDelay": 0,
        "DownloadError": "",
        "ValidationError": "",
        "DiskLimit": 0,
        "FailedSibling": "",
        "VaultError": "",
        "TaskSignalReason": "",
        "TaskSignal": "",
        "GenericSource": "",
    }


def task_state(state: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "State": state,
        "Failed": False,
        "Restarts": 0,
        "LastRestart": None,
        "StartedAt": None,
        "FinishedAt": None,
        "Events": events,
        "TaskHandle": None,
    }


def jcopy(value: Any) -> Any:
    """A deep copy of JSON-shaped state (dicts, lists, scalars), several times faster than
    copy.deepcopy, which listings and events pay for every object they hand out."""
    kind = type(value)
    if kind is dict:
        return {k: jcopy(v) for k, v in value.items()}
    if kind is list:
        return [jcopy(v) for v in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def alloc_stub(alloc: dict[str, Any], *, resources: bool, task_states: bool) -> dict[str, Any]:
    stub = {
        key: jcopy(alloc.get(key)) if task_states or key != "TaskStates" else None
        for key in _STUB_KEYS
    }
    if resources:
        stub["AllocatedResources"] = jcopy(alloc.get("AllocatedResources"))
    return stub


def empty_eval(eval_id: str, job: dict[str, Any], triggered_by: str, index: int) -> dict[str, Any]:
    now = now_ns()
    return {
        "ID": eval_id,
        "Namespace": job.get("Namespace", "default"),
        "Priority": job.get("Priority", 50),
        "Type": job.get("Type", "service"),
        "TriggeredBy": triggered_by,
        "JobID": job["ID"],
        "JobModifyIndex": job.get("JobModifyIndex", 0),
        "NodeID": "",
        "NodeModifyIndex": 0,
        "DeploymentID": "",
        "Status": "complete",
        "StatusDescription": "",
        "Wait": 0,
        "WaitUntil": None,
        "NextEval": "",
        "PreviousEval": "",
        "BlockedEval": "",
        "RelatedEvals": None,
        "FailedTGAllocs": None,
        "ClassEligibility": None,
        "EscapedComputedClass": False,
        "QuotaLimitReached": "",
        "AnnotatePlan": False,
        "QueuedAllocations": {},
        "LeaderACL": "",
        "SnapshotIndex": index,
        "CreateIndex": index,
        "ModifyIndex": index,
        "CreateTime": now,
        "ModifyTime": now,
    }


def eval_stub(evaluation: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "BlockedEval",
        "CreateIndex",
        "CreateTime",
        "DeploymentID",
        "ID",
        "JobID",
        "ModifyIndex",
        "ModifyTime",
        "Namespace",
        "NextEval",
        "NodeID",
        "PreviousEval",
        "Priority",
        "Status",
        "StatusDescription",
        "TriggeredBy",
        "Type",
        "WaitUntil",
    )
    return {key: evaluation.get(key) for key in keys}
