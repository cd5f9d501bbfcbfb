"""The blocks of an HCL2 jobspec that groups and tasks share: constraints and affinities,
networks, services and their checks, restart, update and reschedule policies. Each turns one
block into the API's JSON, as `POST /v1/jobs/parse` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_scheduler_standins.nomad.hcl_values import (
    Body,
    Scope,
)


def constraint_json(
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


def constraints_json(body: Body, name: str = "constraint") -> list[dict[str, Any]] | None:
    affinity = name == "affinity"
    items = [
        constraint_json(raw, f"{body.where} {name}", body.scope, affinity)
        for _, raw in body.blocks(name)
    ]
    return items or None


def network_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
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


def check_restart_json(body: Body) -> dict[str, Any] | None:
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


def check_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
    b = Body(raw, where, scope, _CHECK_ATTRS, {"header", "check_restart"})
    return {
        "CheckRestart": check_restart_json(b),
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


def service_json(raw: dict[str, Any], where: str, scope: Scope) -> dict[str, Any]:
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
    checks = [check_json(c, f"{where} check", scope) for _, c in b.blocks("check")]
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
        "CheckRestart": check_restart_json(b),
        "Connect": None,
    }


def restart_json(body: Body) -> dict[str, Any] | None:
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


def update_json(body: Body) -> dict[str, Any] | None:
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


def reschedule_json(body: Body) -> dict[str, Any] | None:
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


def single_json(
    body: Body, name: str, attrs: set[str], build: Callable[[Body], dict[str, Any]]
) -> dict[str, Any] | None:
    found = body.blocks(name)
    if not found:
        return None
    return build(Body(found[0][1], f"{body.where} {name}", body.scope, attrs, set()))
