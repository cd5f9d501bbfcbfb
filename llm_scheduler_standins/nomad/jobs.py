"""Decoding and canonicalising a Job as the Nomad server does on register (validating it is
in job_validation.py).

Decoding problems (wrong JSON types) are 400 like Go's json decoder; validation problems are
500 with hashicorp/go-multierror text, because Nomad's HTTP layer defaults to 500 for them.
"""

from __future__ import annotations

import copy
from typing import Any

SECOND = 1_000_000_000
JOB_TYPES = {"service", "batch", "system", "sysbatch"}


# What the API client and the server fill in on a job left without them (api/jobs.go
# Canonicalize; the Region is the server's own).
JOB_DEFAULTS: dict[str, Any] = {
    "Namespace": "default",
    "Type": "service",
    "Priority": 50,
    "AllAtOnce": False,
    "NodePool": "default",
    "ParentID": "",
    "Dispatched": False,
    "Stop": False,
    "Stable": False,
    "Status": "",
    "StatusDescription": "",
    "Version": 0,
    "ConsulToken": "",
    "VaultToken": "",
}
UPDATE_DEFAULTS: dict[str, Any] = {
    "Stagger": 30 * SECOND,
    "MaxParallel": 1,
    "HealthCheck": "checks",
    "MinHealthyTime": 10 * SECOND,
    "HealthyDeadline": 300 * SECOND,
    "ProgressDeadline": 600 * SECOND,
    "AutoRevert": False,
    "AutoPromote": False,
    "Canary": 0,
}


class JobDecodeError(ValueError):
    """Answered 400, like a Go JSON decoding error."""


class JobValidationError(ValueError):
    """Answered 500, like Nomad's admission validators."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(multierror(errors))


def multierror(errors: list[str]) -> str:
    head = "1 error occurred:" if len(errors) == 1 else f"{len(errors)} errors occurred:"
    return head + "\n" + "".join(f"\t* {e}\n" for e in errors) + "\n"


def _defaults(target: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Fill missing or null keys; sub-objects given in part get their missing keys filled."""
    for key, value in defaults.items():
        if target.get(key) is None:
            target[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(target[key], dict):
            _defaults(target[key], value)


def _decode_uint(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise JobDecodeError(
            f"json: cannot unmarshal {type(value).__name__} into Go struct field {field} of type"
            " uint64"
        )
    if value < 0:
        raise JobDecodeError(
            f"json: cannot unmarshal number {value} into Go struct field {field} of type uint64"
        )
    return int(value)


def _decode_list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise JobDecodeError(
            f"json: cannot unmarshal {type(value).__name__} into Go struct field {field} of type []"
        )
    for item in value:
        if not isinstance(item, dict):
            raise JobDecodeError(f"json: cannot unmarshal {type(item).__name__} into {field}")
    return value


def canonicalize(raw: Any, *, region: str) -> dict[str, Any]:
    """Fill the defaults the API client and server add; raise JobDecodeError on bad types."""
    if not isinstance(raw, dict):
        raise JobDecodeError("Job must be specified")
    job = copy.deepcopy(raw)
    for key in ("ID", "Name", "Type", "Namespace", "Region", "NodePool"):
        if job.get(key) is not None and not isinstance(job[key], str):
            raise JobDecodeError(
                f"json: cannot unmarshal {type(job[key]).__name__} into Go struct field Job.{key}"
                " of type string"
            )
    _defaults(job, {"Region": region, **JOB_DEFAULTS})
    job.setdefault("Name", job.get("ID"))
    if job.get("Name") is None:
        job["Name"] = job.get("ID")
    if not job.get("Datacenters"):
        job["Datacenters"] = ["*"]
    for key in (
        "Constraints",
        "Affinities",
        "Spreads",
        "Meta",
        "Periodic",
        "ParameterizedJob",
        "Migrate",
        "Reschedule",
        "Multiregion",
    ):
        job.setdefault(key, None)
    job.setdefault("Payload", None)
    _defaults(job, {"Update": UPDATE_DEFAULTS})
    groups = _decode_list(job.get("TaskGroups"), "Job.TaskGroups")
    job["TaskGroups"] = [_canonical_group(g, i) for i, g in enumerate(groups)]
    return job


def _canonical_group(group: dict[str, Any], index: int) -> dict[str, Any]:
    field = f"Job.TaskGroups[{index}]"
    if group.get("Count") is None:
        group["Count"] = 1
    elif isinstance(group["Count"], bool) or not isinstance(group["Count"], int):
        raise JobDecodeError(
            f"json: cannot unmarshal {type(group['Count']).__name__} into Go struct field"
            f" {field}.Count of type int"
        )
    _defaults(
        group,
        {
            "RestartPolicy": {
                "Attempts": 2,
                "Interval": 1800 * SECOND,
                "Delay": 15 * SECOND,
                "Mode": "fail",
                "RenderTemplates": False,
            },
            "EphemeralDisk": {"Sticky": False, "SizeMB": 300, "Migrate": False},
            "ReschedulePolicy": {
                "Attempts": 0,
                "Interval": 0,
                "Delay": 30 * SECOND,
                "DelayFunction": "exponential",
                "MaxDelay": 3600 * SECOND,
                "Unlimited": True,
            },
        },
    )
    for key in ("Constraints", "Affinities", "Spreads", "Meta", "Volumes", "Update", "Migrate"):
        group.setdefault(key, None)
    if isinstance(group["Migrate"], dict):  # api MigrateStrategy.Canonicalize
        _defaults(
            group["Migrate"],
            {
                "MaxParallel": 1,
                "HealthCheck": "checks",
                "MinHealthyTime": 10 * SECOND,
                "HealthyDeadline": 300 * SECOND,
            },
        )
    group["Networks"] = _decode_list(group.get("Networks"), f"{field}.Networks") or None
    services = _decode_list(group.get("Services"), f"{field}.Services")
    group["Services"] = [_canonical_service(s) for s in services] or None
    tasks = _decode_list(group.get("Tasks"), f"{field}.Tasks")
    group["Tasks"] = [_canonical_task(t, f"{field}.Tasks[{i}]") for i, t in enumerate(tasks)]
    return group


def _canonical_service(service: dict[str, Any]) -> dict[str, Any]:
    _defaults(
        service,
        {
            "Provider": "consul",
            "AddressMode": "auto",
            "PortLabel": "",
            "TaskName": "",
            "EnableTagOverride": False,
        },
    )
    for key in ("Tags", "CanaryTags", "Checks", "Meta", "CanaryMeta", "Connect"):
        service.setdefault(key, None)
    return service


def _canonical_task(task: dict[str, Any], field: str) -> dict[str, Any]:
    _defaults(
        task,
        {
            "User": "",
            "Leader": False,
            "KillTimeout": 5 * SECOND,
            "ShutdownDelay": 0,
            "KillSignal": "",
            "Kind": "",
            "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False},
        },
    )
    for key in (
        "Config",
        "Env",
        "Constraints",
        "Affinities",
        "Meta",
        "Templates",
        "Artifacts",
        "Lifecycle",
        "Vault",
        "VolumeMounts",
        "DispatchPayload",
    ):
        task.setdefault(key, None)
    services = _decode_list(task.get("Services"), f"{field}.Services")
    task["Services"] = [_canonical_service(s) for s in services] or None
    resources = task.get("Resources")
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise JobDecodeError(f"json: cannot unmarshal into Go struct field {field}.Resources")
    _defaults(resources, {"CPU": 100, "Cores": 0, "MemoryMB": 300, "MemoryMaxMB": 0, "DiskMB": 0})
    for key in ("CPU", "Cores", "MemoryMB", "MemoryMaxMB"):
        _decode_uint(resources[key], f"{field}.Resources.{key}")
    resources.setdefault("Networks", None)
    devices = _decode_list(resources.get("Devices"), f"{field}.Resources.Devices")
    for i, device in enumerate(devices):
        device_field = f"{field}.Resources.Devices[{i}]"
        device["Count"] = (
            1 if device.get("Count") is None else _decode_uint(device["Count"], device_field)
        )
        device.setdefault("Constraints", None)
        device.setdefault("Affinities", None)
    resources["Devices"] = devices or None
    task["Resources"] = resources
    return task
