"""Validating a canonical Job as the Nomad server does on register: every problem found is
reported at once, as hashicorp/go-multierror text (a 500 in Nomad's HTTP layer).
"""

from __future__ import annotations

import json
import re
from typing import Any

from llm_scheduler_standins.nomad.jobs import JOB_TYPES, SECOND, JobValidationError, multierror

# nomad/structs/services.go Service.ValidateName: RFC 1123 labels, at most 63 characters.
SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])$")
SERVICE_NAME_ERROR = (
    "Service name must be valid per RFC 1123 and can contain only alphanumeric characters or"
    " dashes and must be no longer than 63 characters"
)
# ${...} interpolations are replaced before the name check (args.ReplaceEnvWithPlaceHolder).
_INTERPOLATION = re.compile(r"\$\{[^}]*\}")
MAX_PRIORITY = 100  # the server's job_max_priority default


def validate(job: dict[str, Any]) -> None:
    """Raise JobValidationError with every problem found, as Nomad's register does.

    nomad/structs/structs.go Job.Validate, plus the admission validator's priority check
    (nomad/job_endpoint_hooks.go jobValidate.Validate); one go-multierror list, answered 500.
    """
    errors: list[str] = []
    if not job.get("Region"):
        errors.append("Missing job region")
    if not job.get("ID"):
        errors.append("Missing job ID")
    elif " " in job["ID"]:
        errors.append("Job ID contains a space")
    elif "\x00" in job["ID"]:
        errors.append("Job ID contains a null character")
    if not job.get("Name"):
        errors.append("Missing job name")
    elif "\x00" in job["Name"]:
        errors.append("Job Name contains a null character")
    if not job.get("Namespace"):
        errors.append("Job must be in a namespace")
    if not job.get("Type"):
        errors.append("Missing job type")
    elif job["Type"] not in JOB_TYPES:
        errors.append(f'Invalid job type: "{job.get("Type")}"')
    for dc in job.get("Datacenters") or []:
        if dc == "":
            errors.append("Job datacenter must be non-empty string")
    groups = job.get("TaskGroups") or []
    if not groups:
        errors.append("Missing job task groups")
    names: dict[str, int] = {}
    for index, group in enumerate(groups):
        name = group.get("Name") or ""
        if not name:
            errors.append(f"Job task group {index + 1} missing name")
        elif name in names:
            errors.append(
                f"Job task group {index + 1} redefines '{name}' from group {names[name] + 1}"
            )
        else:
            names[name] = index
        if job.get("Type") == "system" and int(group.get("Count") or 0) > 1:
            errors.append(
                f"Job task group {name} has count {group['Count']}. Count cannot exceed 1 with"
                " system scheduler"
            )
    for group in groups:
        problems = _group_problems(group) + _strategy_problems(job, group)
        if problems:
            errors.append(
                f"Task group {group.get('Name') or ''} validation failed: {multierror(problems)}"
            )
    priority = job.get("Priority")
    if not isinstance(priority, int) or not 1 <= priority <= MAX_PRIORITY:
        errors.append(f"job priority must be between [1, {MAX_PRIORITY}]")
    if errors:
        raise JobValidationError(errors)


def _service_problems(service: dict[str, Any]) -> list[str]:
    """nomad/structs/services.go Service.Validate (the name and address_mode rules)."""
    problems: list[str] = []
    name = str(service.get("Name") or "")
    if not SERVICE_NAME.match(_INTERPOLATION.sub("ENV-VAR", name)):
        problems.append(f"{SERVICE_NAME_ERROR}: {json.dumps(name)}")
    mode = service.get("AddressMode") or ""
    if mode not in ("", "auto", "host", "driver", "alloc", "alloc_ipv6"):
        problems.append(
            f'Service address_mode must be "auto", "host", or "driver"; not {json.dumps(mode)}'
        )
    return problems


def _go_duration(ns: int) -> str:
    """Enough of Go's time.Duration String for validation messages."""
    if ns % SECOND == 0:
        seconds = ns // SECOND
        return f"{seconds // 60}m{seconds % 60}s" if abs(seconds) >= 60 else f"{seconds}s"
    return f"{ns}ns"


def _strategy_problems(job: dict[str, Any], group: dict[str, Any]) -> list[str]:
    """TaskGroup.Validate on the update and migrate blocks (nomad/structs/structs.go
    UpdateStrategy.Validate, MigrateStrategy.Validate); their errors join the group's list."""
    problems: list[str] = []
    kind = job.get("Type")
    update = group.get("Update")
    if isinstance(update, dict):
        if kind not in ("service", "system"):
            problems.append(f'Job type "{kind}" does not allow update block')
        merged = {**(job.get("Update") or {}), **{k: v for k, v in update.items() if v is not None}}
        problems += _update_problems(merged)
    elif kind in ("service", "system") and isinstance(job.get("Update"), dict):
        problems += _update_problems(job["Update"])
    migrate = group.get("Migrate")
    if isinstance(migrate, dict):
        if kind != "service":
            problems.append(f'Job type "{kind}" does not allow migrate block')
        else:
            problems += _migrate_problems(migrate)
    return problems


def _update_problems(u: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    check = u.get("HealthCheck")
    if check not in ("checks", "task_states", "manual"):
        problems.append(f"Invalid health check given: {json.dumps(check or '')}")
    max_parallel, canary = int(u.get("MaxParallel") or 0), int(u.get("Canary") or 0)
    min_healthy = int(u.get("MinHealthyTime") or 0)
    healthy = int(u.get("HealthyDeadline") or 0)
    progress = int(u.get("ProgressDeadline") or 0)
    if max_parallel < 0:
        problems.append(f"Max parallel can not be less than zero: {max_parallel} < 0")
    if canary < 0:
        problems.append(f"Canary count can not be less than zero: {canary} < 0")
    if canary == 0 and u.get("AutoPromote"):
        problems.append("Auto Promote requires a Canary count greater than zero")
    if min_healthy < 0:
        problems.append(
            f"Minimum healthy time may not be less than zero: {_go_duration(min_healthy)}"
        )
    if healthy <= 0:
        problems.append(f"Healthy deadline must be greater than zero: {_go_duration(healthy)}")
    if progress < 0:
        problems.append(f"Progress deadline must be zero or greater: {_go_duration(progress)}")
    if min_healthy >= healthy:
        problems.append(
            "Minimum healthy time must be less than healthy deadline:"
            f" {_go_duration(min_healthy)} > {_go_duration(healthy)}"
        )
    if progress != 0 and healthy >= progress:
        problems.append(
            "Healthy deadline must be less than progress deadline:"
            f" {_go_duration(healthy)} > {_go_duration(progress)}"
        )
    if int(u.get("Stagger") or 0) <= 0:
        problems.append(
            f"Stagger must be greater than zero: {_go_duration(int(u.get('Stagger') or 0))}"
        )
    return problems


def _migrate_problems(m: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    raw = m.get("MaxParallel")
    max_parallel = 1 if raw is None else int(raw)
    check = m.get("HealthCheck") or ""
    min_healthy = int(m.get("MinHealthyTime") or 0)
    healthy = int(m.get("HealthyDeadline") or 0)
    if max_parallel < 0:
        problems.append(f"MaxParallel must be >= 0 but found {max_parallel}")
    if check == "" and max_parallel > 0:
        problems.append("Missing HealthCheck")
    elif check not in ("", "checks", "task_states"):
        problems.append(f"Invalid HealthCheck: {json.dumps(check)}")
    if min_healthy < 0:
        problems.append(f"MinHealthyTime is {_go_duration(min_healthy)} and must be >= 0")
    if healthy < 0:
        problems.append(f"HealthyDeadline is {_go_duration(healthy)} and must be >= 0")
    if min_healthy > healthy:
        problems.append("MinHealthyTime must be less than HealthyDeadline")
    return problems


def _group_problems(group: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if group.get("Count", 1) < 0:
        problems.append("Task group count can't be negative")
    tasks = group.get("Tasks") or []
    if not tasks:
        problems.append("Missing tasks for task group")
    # TaskGroup.validateServices: "Service[%d] %s validation failed: %s", wrapped once more.
    service_errors = [
        f"Service[{i}] {s.get('Name') or ''} validation failed: {multierror(found)}"
        for i, s in enumerate(group.get("Services") or [])
        if (found := _service_problems(s))
    ]
    if service_errors:
        problems.append(f"Task group service validation failed: {multierror(service_errors)}")
    task_names: set[str] = set()
    for index, task in enumerate(tasks):
        tname = task.get("Name") or ""
        if not tname:
            problems.append(f"Task {index + 1} missing name")
            continue
        if tname in task_names:
            problems.append(f"Task {index + 1} redefines '{tname}' from task {index}")
        task_names.add(tname)
        task_problems = []
        if not task.get("Driver"):
            task_problems.append("Missing task driver")
        # validateServices(t, ...): 'service[%d] %+q validation failed: %s'.
        service_errors = [
            f"service[{i}] {json.dumps(s.get('Name') or '')} validation failed: {multierror(found)}"
            for i, s in enumerate(task.get("Services") or [])
            if (found := _service_problems(s))
        ]
        if service_errors:
            task_problems.append(multierror(service_errors))
        for device in task["Resources"].get("Devices") or []:
            if not device.get("Name"):
                task_problems.append(
                    "device name must be given as one of the following: type,"
                    " vendor/type, or vendor/type/name"
                )
            for c in device.get("Constraints") or []:
                if c.get("Operand") in ("distinct_hosts", "distinct_property"):
                    task_problems.append(
                        f"Constraint {c.get('Operand')!r} not allowed in device constraints"
                    )
        if task_problems:
            problems.append(f"Task {tname} validation failed: {multierror(task_problems)}")
    return problems
