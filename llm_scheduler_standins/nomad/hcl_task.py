"""A task block of an HCL2 jobspec and what only tasks hold: resources and devices, templates,
artifacts. Each turns one block into the API's JSON, as `POST /v1/jobs/parse` does.
"""

from __future__ import annotations

from typing import Any

from llm_scheduler_standins.nomad.hcl_blocks import (
    constraints_json,
    network_json,
    restart_json,
    service_json,
    single_json,
)
from llm_scheduler_standins.nomad.hcl_values import (
    Body,
    HclError,
    Scope,
)
from llm_scheduler_standins.nomad.hcl_volumes import volume_mounts_json


def device_json(label: str | None, raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    if not label:
        raise HclError(f"{where}: device block needs a name label")
    b = Body(raw, f"{where} device {label!r}", scope, {"count"}, {"constraint", "affinity"})
    count = b.integer("count", 1)
    if count is not None and count < 0:
        raise HclError(f"{b.where}: count must not be negative, got {count}")
    return {
        "Name": label,
        "Count": count,
        "Constraints": constraints_json(b),
        "Affinities": constraints_json(b, "affinity"),
    }


def resources_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
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
        "Networks": [network_json(n, f"{where} network", scope) for _, n in b.blocks("network")]
        or None,
        "Devices": [device_json(label, d, where, scope) for label, d in b.blocks("device")] or None,
    }


def template_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
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


def artifact_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    ab = Body(
        raw,
        f"{where} artifact",
        scope,
        {"source", "destination", "mode", "options", "headers"},
        {"options", "headers"},
    )
    return {
        "GetterSource": ab.text("source", ""),
        "RelativeDest": ab.text("destination", "local/"),
        "GetterMode": ab.text("mode", "any"),
        "GetterOptions": ab.map("options"),
        "GetterHeaders": ab.map("headers"),
    }


def task_json(label: str | None, raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    if not label:
        raise HclError(f"{where}: task block needs a name label")
    b = Body(raw, f"{where} task {label!r}", scope, _TASK_ATTRS, _TASK_BLOCKS)
    resources = b.blocks("resources")
    artifacts = [artifact_json(a, b.where, scope) for _, a in b.blocks("artifact")]
    return {
        "Name": label,
        "Driver": b.text("driver", "") or "",
        "User": b.text("user", "") or "",
        "Config": b.map("config"),
        "Env": b.map("env"),
        "Meta": b.map("meta"),
        "Services": [service_json(s, f"{b.where} service", scope) for _, s in b.blocks("service")]
        or None,
        "Resources": resources_json(resources[0][1], f"{b.where} resources", scope)
        if resources
        else None,
        "Constraints": constraints_json(b),
        "Affinities": constraints_json(b, "affinity"),
        "RestartPolicy": restart_json(b),
        "Templates": [
            template_json(t, f"{b.where} template", scope) for _, t in b.blocks("template")
        ]
        or None,
        "Artifacts": artifacts or None,
        "Lifecycle": single_json(
            b,
            "lifecycle",
            {"hook", "sidecar"},
            lambda x: {"Hook": x.text("hook", ""), "Sidecar": bool(x.flag("sidecar", False))},
        ),
        "LogConfig": single_json(
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
        "VolumeMounts": volume_mounts_json(b),
        "DispatchPayload": None,
    }
