"""HCL2 jobspecs to the API's JSON Job, the way `POST /v1/jobs/parse` answers.

Input variables (`variable` blocks with defaults, overridden by the request's `Variables`
string of HCL assignments) and `locals` are substituted; runtime variables such as
`${node.unique.id}`, `${attr.*}`, `${meta.*}`, `${device.*}` and `${NOMAD_*}` are left for
Nomad, exactly as the real parser does. Unknown arguments and blocks are errors, as in Nomad.
"""

from __future__ import annotations

from typing import Any

import hcl2

from llm_scheduler_standins.nomad.hcl_blocks import (
    constraints_json,
    network_json,
    reschedule_json,
    restart_json,
    service_json,
    single_json,
    update_json,
)
from llm_scheduler_standins.nomad.hcl_task import task_json
from llm_scheduler_standins.nomad.hcl_values import (
    OPTIONS,
    Body,
    HclError,
    Scope,
    blocks_of,
    first_line,
    locals_from,
    variables_from,
)
from llm_scheduler_standins.nomad.hcl_volumes import volumes_json
from llm_scheduler_standins.nomad.jobs import JobDecodeError
from llm_scheduler_standins.nomad.jobs import canonicalize as canonicalize_job

__all__ = ["HclError", "parse_job"]


_GROUP_ATTRS = {
    "count",
    "shutdown_delay",
    "stop_after_client_disconnect",
    "max_client_disconnect",
    "prevent_reschedule_on_lost",
    "meta",
}
_GROUP_BLOCKS = {
    "task",
    "constraint",
    "affinity",
    "spread",
    "network",
    "service",
    "restart",
    "update",
    "reschedule",
    "ephemeral_disk",
    "meta",
    "volume",
    "migrate",
    "scaling",
    "consul",
    "disconnect",
}


def _spreads(body: Body) -> list[dict[str, Any]] | None:
    found = []
    for _, raw in body.blocks("spread"):
        b = Body(raw, f"{body.where} spread", body.scope, {"attribute", "weight"}, {"target"})
        targets = []
        for label, t in b.blocks("target"):
            tb = Body(t, f"{b.where} target", body.scope, {"value", "percent"}, set())
            targets.append(
                {"Value": tb.text("value", label or ""), "Percent": tb.integer("percent", 0)}
            )
        found.append(
            {
                "Attribute": b.text("attribute", ""),
                "Weight": b.integer("weight", 50),
                "SpreadTarget": targets or None,
            }
        )
    return found or None


def _group(label: str | None, raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    if not label:
        raise HclError(f"{where}: group block needs a name label")
    b = Body(raw, f"{where} group {label!r}", scope, _GROUP_ATTRS, _GROUP_BLOCKS)
    count = b.integer("count")
    return {
        "Name": label,
        "Count": count,
        "Constraints": constraints_json(b),
        "Affinities": constraints_json(b, "affinity"),
        "Spreads": _spreads(b),
        "Tasks": [task_json(t_label, t, b.where, scope) for t_label, t in b.blocks("task")],
        "Networks": [network_json(n, f"{b.where} network", scope) for _, n in b.blocks("network")]
        or None,
        "Services": [service_json(s, f"{b.where} service", scope) for _, s in b.blocks("service")]
        or None,
        "RestartPolicy": restart_json(b),
        "ReschedulePolicy": reschedule_json(b),
        "Update": update_json(b),
        "EphemeralDisk": single_json(
            b,
            "ephemeral_disk",
            {"size", "sticky", "migrate"},
            lambda x: {
                "SizeMB": x.integer("size", 300),
                "Sticky": bool(x.flag("sticky", False)),
                "Migrate": bool(x.flag("migrate", False)),
            },
        ),
        "Meta": b.map("meta"),
        "ShutdownDelay": b.duration("shutdown_delay"),
        "Volumes": volumes_json(b),
        "Migrate": None,
        "Scaling": None,
    }


_JOB_ATTRS = {
    "name",
    "region",
    "namespace",
    "type",
    "priority",
    "datacenters",
    "node_pool",
    "all_at_once",
    "meta",
    "vault_token",
    "consul_token",
}
_JOB_BLOCKS = {
    "group",
    "constraint",
    "affinity",
    "spread",
    "update",
    "meta",
    "periodic",
    "parameterized",
    "reschedule",
    "migrate",
    "multiregion",
    "vault",
    "ui",
}


def _job(label: str, raw: dict[str, Any], scope: Scope) -> dict[str, Any]:
    b = Body(raw, f"job {label!r}", scope, _JOB_ATTRS, _JOB_BLOCKS)
    return {
        "Region": b.text("region"),
        "Namespace": b.text("namespace"),
        "ID": label,
        "Name": b.text("name", label),
        "Type": b.text("type"),
        "Priority": b.integer("priority"),
        "AllAtOnce": b.flag("all_at_once"),
        "Datacenters": b.strings("datacenters"),
        "NodePool": b.text("node_pool"),
        "Constraints": constraints_json(b),
        "Affinities": constraints_json(b, "affinity"),
        "Spreads": _spreads(b),
        "TaskGroups": [_group(g_label, g, b.where, scope) for g_label, g in b.blocks("group")]
        or None,
        "Update": update_json(b),
        "Multiregion": None,
        "Periodic": None,
        "ParameterizedJob": None,
        "Reschedule": reschedule_json(b),
        "Migrate": None,
        "Meta": b.map("meta"),
        "Payload": None,
        "ParentID": None,
        "Dispatched": False,
        "Stop": None,
        "Status": None,
        "StatusDescription": None,
        "Stable": None,
        "Version": None,
        "SubmitTime": None,
        "CreateIndex": None,
        "ModifyIndex": None,
        "JobModifyIndex": None,
    }


def _merge_check_restart(job: dict[str, Any]) -> None:
    """A service's check_restart applies to each of its checks that has none of its own
    (api/services.go Service.Canonicalize), as Nomad does on canonicalisation."""
    for group in job.get("TaskGroups") or []:
        services = list(group.get("Services") or [])
        for task in group.get("Tasks") or []:
            services += task.get("Services") or []
        for service in services:
            outer = service.get("CheckRestart")
            for check in service.get("Checks") or []:
                if outer and not check.get("CheckRestart"):
                    check["CheckRestart"] = dict(outer)


def _drop_nones(group_or_task: dict[str, Any]) -> None:
    """Canonicalisation fills defaults for missing keys only: remove parser-side Nones."""
    for key in [k for k, v in group_or_task.items() if v is None]:
        del group_or_task[key]


def parse_job(
    text: str, *, variables: str = "", canonicalize: bool = False, region: str = "global"
) -> dict[str, Any]:
    """The API JSON Job for an HCL2 jobspec; raises HclError with Nomad-like messages."""
    try:
        tree = hcl2.loads(text, serialization_options=OPTIONS)
    except Exception as exc:  # the parser raises lark's many exception types
        raise HclError(f"input.hcl: {first_line(exc)}") from exc
    jobs = blocks_of(tree, "job")
    if len(jobs) != 1 or jobs[0][0] is None:
        raise HclError(
            "expected exactly one labelled job block"
            if jobs
            else 'input.hcl: Missing job block; A "job" block is required'
        )
    for key in tree:
        if key not in ("job", "variable", "locals"):
            raise HclError(
                f'input.hcl: Unsupported block type; Blocks of type "{key}" are not expected here.'
            )
    declared = variables_from(tree, variables)
    scope = Scope(declared, locals_from(tree, declared))
    label, body = jobs[0]
    job = _job(label or "", body, scope)
    if not canonicalize:
        return job
    _merge_check_restart(job)
    had_datacenters = job.get("Datacenters") is not None
    for group in job.get("TaskGroups") or []:
        _drop_nones(group)
        for task in group.get("Tasks") or []:
            _drop_nones(task)
            if task.get("Resources"):
                _drop_nones(task["Resources"])
    _drop_nones(job)
    try:
        result = canonicalize_job(job, region=region)
    except JobDecodeError as exc:
        raise HclError(str(exc)) from exc
    if not had_datacenters:
        result["Datacenters"] = None  # the API client leaves this to the server
    for key in ("Stop", "Status", "StatusDescription", "Version", "Stable"):
        result.setdefault(key, None)
    result.setdefault("SubmitTime", None)
    result.setdefault("CreateIndex", 0)
    result.setdefault("ModifyIndex", 0)
    result.setdefault("JobModifyIndex", 0)
    result["ParentID"] = result.get("ParentID") or ""
    return result
