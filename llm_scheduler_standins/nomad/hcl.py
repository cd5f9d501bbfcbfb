"""HCL2 jobspecs to the API's JSON Job, the way `POST /v1/jobs/parse` answers.

Input variables (`variable` blocks with defaults, overridden by the request's `Variables`
string of HCL assignments) and `locals` are substituted; runtime variables such as
`${node.unique.id}`, `${attr.*}`, `${meta.*}`, `${device.*}` and `${NOMAD_*}` are left for
Nomad, exactly as the real parser does. Unknown arguments and blocks are errors, as in Nomad.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hcl2

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
from llm_scheduler_standins.nomad.jobs import JobDecodeError
from llm_scheduler_standins.nomad.jobs import canonicalize as canonicalize_job

__all__ = ["HclError", "parse_job"]


# ---------------------------------------------------------------- job structure


def _constraint(
    raw: dict[str, Any], where: str, scope: Scope, affinity: bool = False
) -> dict[str, Any]:
    shorthand = {
        "distinct_hosts",
        "distinct_property",
        "regexp",
        "set_contains",
        "set_contains_any",
        "version",
        "semver",
    }
    attrs = {"attribute", "operator", "value", *shorthand} | ({"weight"} if affinity else set())
    b = Body(raw, where, scope, attrs, set())
    operand = b.text("operator") or "="
    rtarget = b.text("value") or ""
    for key in sorted(shorthand):
        if key in raw:
            operand = key
            rtarget = b.text(key) or ""
            if key == "distinct_hosts":
                rtarget = "true" if b.flag(key) else "false"
    result: dict[str, Any] = {
        "LTarget": b.text("attribute") or "",
        "RTarget": rtarget,
        "Operand": operand,
    }
    if affinity:
        result["Weight"] = b.integer("weight", 50)
    return result


def _constraints(body: Body, name: str = "constraint") -> list[dict[str, Any]] | None:
    affinity = name == "affinity"
    items = [
        _constraint(raw, f"{body.where} {name}", body.scope, affinity)
        for _, raw in body.blocks(name)
    ]
    return items or None


def _network(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(raw, where, scope, {"mode", "mbits", "hostname"}, {"port", "dns"})
    reserved: list[dict[str, Any]] = []
    dynamic: list[dict[str, Any]] = []
    for label, port_raw in b.blocks("port"):
        p = Body(port_raw, f"{where} port {label}", scope, {"static", "to", "host_network"}, set())
        entry = {
            "Label": label or "",
            "Value": p.integer("static", 0) or 0,
            "To": p.integer("to", 0),
            "HostNetwork": p.text("host_network", "default"),
        }
        (reserved if entry["Value"] else dynamic).append(entry)
    return {
        "Mode": b.text("mode", "") or "",
        "Device": "",
        "CIDR": "",
        "IP": "",
        "Hostname": b.text("hostname", "") or "",
        "MBits": b.integer("mbits"),
        "DNS": None,
        "ReservedPorts": reserved or None,
        "DynamicPorts": dynamic or None,
    }


_CHECK_ATTRS = {
    "name",
    "type",
    "path",
    "port",
    "protocol",
    "interval",
    "timeout",
    "method",
    "command",
    "args",
    "initial_status",
    "tls_skip_verify",
    "address_mode",
    "header",
    "expose",
    "task",
    "grpc_service",
    "grpc_use_tls",
    "on_update",
    "success_before_passing",
    "failures_before_critical",
    "body",
    "tls_server_name",
    "notes",
}


def _check_restart(body: Body) -> dict[str, Any] | None:
    """`check_restart { limit, grace, ignore_warnings }` as the API's CheckRestart."""
    found = body.blocks("check_restart")
    if not found:
        return None
    b = Body(
        found[0][1],
        f"{body.where} check_restart",
        body.scope,
        {"limit", "grace", "ignore_warnings"},
        set(),
    )
    return {
        "Limit": b.integer("limit", 0),
        "Grace": b.duration("grace", 0),
        "IgnoreWarnings": bool(b.flag("ignore_warnings", False)),
    }


def _check(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(raw, where, scope, _CHECK_ATTRS, {"header", "check_restart"})
    return {
        "CheckRestart": _check_restart(b),
        "Name": b.text("name", "") or "",
        "Type": b.text("type", "") or "",
        "Command": b.text("command", "") or "",
        "Args": b.strings("args"),
        "Path": b.text("path", "") or "",
        "Protocol": b.text("protocol", "") or "",
        "PortLabel": b.text("port", "") or "",
        "AddressMode": b.text("address_mode", "") or "",
        "Interval": b.duration("interval", 0),
        "Timeout": b.duration("timeout", 0),
        "InitialStatus": b.text("initial_status", "") or "",
        "TLSSkipVerify": bool(b.flag("tls_skip_verify", False)),
        "Method": b.text("method", "") or "",
        "Header": b.map("header"),
        "Body": b.text("body", "") or "",
        "TaskName": b.text("task", "") or "",
        "OnUpdate": b.text("on_update", "") or "",
        "SuccessBeforePassing": b.integer("success_before_passing", 0),
        "FailuresBeforeCritical": b.integer("failures_before_critical", 0),
    }


def _service(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(
        raw,
        where,
        scope,
        {
            "name",
            "port",
            "tags",
            "canary_tags",
            "meta",
            "canary_meta",
            "provider",
            "address_mode",
            "address",
            "task",
            "enable_tag_override",
            "on_update",
            "tagged_addresses",
        },
        {"check", "meta", "canary_meta", "connect", "check_restart", "tagged_addresses"},
    )
    checks = [_check(c, f"{where} check", scope) for _, c in b.blocks("check")]
    return {
        "Name": b.text("name", "") or "",
        "TaskName": b.text("task", "") or "",
        "PortLabel": b.text("port", "") or "",
        "AddressMode": b.text("address_mode", "auto") or "auto",
        "Address": b.text("address", "") or "",
        "EnableTagOverride": bool(b.flag("enable_tag_override", False)),
        "Tags": b.strings("tags"),
        "CanaryTags": b.strings("canary_tags"),
        "Checks": checks or None,
        "Meta": b.map("meta"),
        "CanaryMeta": b.map("canary_meta"),
        "Provider": b.text("provider", "consul") or "consul",
        "OnUpdate": b.text("on_update", "") or "",
        "CheckRestart": _check_restart(b),
        "Connect": None,
    }


def _device(label: str | None, raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    if not label:
        raise HclError(f"{where}: device block needs a name label")
    b = Body(raw, f"{where} device {label!r}", scope, {"count"}, {"constraint", "affinity"})
    count = b.integer("count", 1)
    if count is not None and count < 0:
        raise HclError(f"{b.where}: count must not be negative, got {count}")
    return {
        "Name": label,
        "Count": count,
        "Constraints": _constraints(b),
        "Affinities": _constraints(b, "affinity"),
    }


def _resources(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(
        raw,
        where,
        scope,
        {"cpu", "cores", "memory", "memory_max", "disk", "iops", "secrets"},
        {"device", "network", "numa"},
    )
    return {
        "CPU": b.integer("cpu"),
        "Cores": b.integer("cores"),
        "MemoryMB": b.integer("memory"),
        "MemoryMaxMB": b.integer("memory_max"),
        "DiskMB": b.integer("disk"),
        "Networks": [_network(n, f"{where} network", scope) for _, n in b.blocks("network")]
        or None,
        "Devices": [_device(label, d, where, scope) for label, d in b.blocks("device")] or None,
    }


def _template_block(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(
        raw,
        where,
        scope,
        {
            "data",
            "destination",
            "source",
            "change_mode",
            "change_signal",
            "env",
            "perms",
            "left_delimiter",
            "right_delimiter",
            "splay",
            "uid",
            "gid",
            "error_on_missing_key",
            "once",
        },
        {"change_script", "wait"},
    )
    return {
        "SourcePath": b.text("source", "") or "",
        "DestPath": b.text("destination", "") or "",
        "EmbeddedTmpl": b.text("data", "") or "",
        "ChangeMode": b.text("change_mode", "restart") or "restart",
        "ChangeSignal": b.text("change_signal", "") or "",
        "Splay": b.duration("splay", 5 * 10**9),
        "Perms": b.text("perms", "0644") or "0644",
        "LeftDelim": b.text("left_delimiter", "{{") or "{{",
        "RightDelim": b.text("right_delimiter", "}}") or "}}",
        "Envvars": bool(b.flag("env", False)),
        "ErrMissingKey": bool(b.flag("error_on_missing_key", False)),
        "Once": bool(b.flag("once", False)),
    }


def _restart(body: Body) -> dict[str, Any] | None:
    found = body.blocks("restart")
    if not found:
        return None
    b = Body(
        found[0][1],
        f"{body.where} restart",
        body.scope,
        {"attempts", "interval", "delay", "mode", "render_templates"},
        set(),
    )
    return {
        "Attempts": b.integer("attempts"),
        "Interval": b.duration("interval"),
        "Delay": b.duration("delay"),
        "Mode": b.text("mode"),
        "RenderTemplates": b.flag("render_templates"),
    }


def _update(body: Body) -> dict[str, Any] | None:
    found = body.blocks("update")
    if not found:
        return None
    b = Body(
        found[0][1],
        f"{body.where} update",
        body.scope,
        {
            "max_parallel",
            "health_check",
            "min_healthy_time",
            "healthy_deadline",
            "progress_deadline",
            "auto_revert",
            "auto_promote",
            "canary",
            "stagger",
        },
        set(),
    )
    return {
        "Stagger": b.duration("stagger"),
        "MaxParallel": b.integer("max_parallel"),
        "HealthCheck": b.text("health_check"),
        "MinHealthyTime": b.duration("min_healthy_time"),
        "HealthyDeadline": b.duration("healthy_deadline"),
        "ProgressDeadline": b.duration("progress_deadline"),
        "AutoRevert": b.flag("auto_revert"),
        "AutoPromote": b.flag("auto_promote"),
        "Canary": b.integer("canary"),
    }


def _reschedule(body: Body) -> dict[str, Any] | None:
    found = body.blocks("reschedule")
    if not found:
        return None
    b = Body(
        found[0][1],
        f"{body.where} reschedule",
        body.scope,
        {"attempts", "interval", "delay", "delay_function", "max_delay", "unlimited"},
        set(),
    )
    return {
        "Attempts": b.integer("attempts"),
        "Interval": b.duration("interval"),
        "Delay": b.duration("delay"),
        "DelayFunction": b.text("delay_function"),
        "MaxDelay": b.duration("max_delay"),
        "Unlimited": b.flag("unlimited"),
    }


def _single(
    body: Body, name: str, attrs: set[str], build: Callable[[Body], dict[str, Any]]
) -> dict[str, Any] | None:
    found = body.blocks(name)
    if not found:
        return None
    return build(Body(found[0][1], f"{body.where} {name}", body.scope, attrs, set()))


_TASK_ATTRS = {
    "driver",
    "user",
    "kill_timeout",
    "kill_signal",
    "leader",
    "shutdown_delay",
    "kind",
    "env",
    "meta",
    "config",
}
_TASK_BLOCKS = {
    "config",
    "env",
    "meta",
    "resources",
    "service",
    "template",
    "constraint",
    "affinity",
    "restart",
    "lifecycle",
    "artifact",
    "logs",
    "identity",
    "vault",
    "volume_mount",
    "dispatch_payload",
    "scaling",
    "consul",
    "csi_plugin",
}


def _task(label: str | None, raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    if not label:
        raise HclError(f"{where}: task block needs a name label")
    b = Body(raw, f"{where} task {label!r}", scope, _TASK_ATTRS, _TASK_BLOCKS)
    resources = b.blocks("resources")
    artifacts = []
    for _, a in b.blocks("artifact"):
        ab = Body(
            a,
            f"{b.where} artifact",
            scope,
            {"source", "destination", "mode", "options", "headers"},
            {"options", "headers"},
        )
        artifacts.append(
            {
                "GetterSource": ab.text("source", ""),
                "RelativeDest": ab.text("destination", "local/"),
                "GetterMode": ab.text("mode", "any"),
                "GetterOptions": ab.map("options"),
                "GetterHeaders": ab.map("headers"),
            }
        )
    return {
        "Name": label,
        "Driver": b.text("driver", "") or "",
        "User": b.text("user", "") or "",
        "Config": b.map("config"),
        "Env": b.map("env"),
        "Meta": b.map("meta"),
        "Services": [_service(s, f"{b.where} service", scope) for _, s in b.blocks("service")]
        or None,
        "Resources": _resources(resources[0][1], f"{b.where} resources", scope)
        if resources
        else None,
        "Constraints": _constraints(b),
        "Affinities": _constraints(b, "affinity"),
        "RestartPolicy": _restart(b),
        "Templates": [
            _template_block(t, f"{b.where} template", scope) for _, t in b.blocks("template")
        ]
        or None,
        "Artifacts": artifacts or None,
        "Lifecycle": _single(
            b,
            "lifecycle",
            {"hook", "sidecar"},
            lambda x: {"Hook": x.text("hook", ""), "Sidecar": bool(x.flag("sidecar", False))},
        ),
        "LogConfig": _single(
            b,
            "logs",
            {"max_files", "max_file_size", "disabled"},
            lambda x: {
                "MaxFiles": x.integer("max_files", 10),
                "MaxFileSizeMB": x.integer("max_file_size", 10),
                "Disabled": bool(x.flag("disabled", False)),
            },
        ),
        "KillTimeout": b.duration("kill_timeout"),
        "KillSignal": b.text("kill_signal", "") or "",
        "ShutdownDelay": b.duration("shutdown_delay", 0),
        "Leader": bool(b.flag("leader", False)),
        "Kind": b.text("kind", "") or "",
        "Vault": None,
        "VolumeMounts": None,
        "DispatchPayload": None,
    }


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
        "Constraints": _constraints(b),
        "Affinities": _constraints(b, "affinity"),
        "Spreads": _spreads(b),
        "Tasks": [_task(t_label, t, b.where, scope) for t_label, t in b.blocks("task")],
        "Networks": [_network(n, f"{b.where} network", scope) for _, n in b.blocks("network")]
        or None,
        "Services": [_service(s, f"{b.where} service", scope) for _, s in b.blocks("service")]
        or None,
        "RestartPolicy": _restart(b),
        "ReschedulePolicy": _reschedule(b),
        "Update": _update(b),
        "EphemeralDisk": _single(
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
        "Volumes": None,
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
        "Constraints": _constraints(b),
        "Affinities": _constraints(b, "affinity"),
        "Spreads": _spreads(b),
        "TaskGroups": [_group(g_label, g, b.where, scope) for g_label, g in b.blocks("group")]
        or None,
        "Update": _update(b),
        "Multiregion": None,
        "Periodic": None,
        "ParameterizedJob": None,
        "Reschedule": _reschedule(b),
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
