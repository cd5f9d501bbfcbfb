"""Device requests against a node's device groups, as Nomad's device allocator reads them:
a request's `vendor/type/name`, its constraints and affinities on `${device.*}`, and which
healthy, free instances of a group it may take.
"""

from __future__ import annotations

import re
from typing import Any

from llm_scheduler_standins.nomad.attributes import Value, from_attribute
from llm_scheduler_standins.nomad.constraints import satisfies, split_set
from llm_scheduler_standins.nomad.fingerprint import DeviceGroup

_ID_OPERANDS_IN = {"=", "==", "is", "set_contains", "set_contains_all", "set_contains_any"}
_ID_OPERANDS_OUT = {"!=", "not"}
_VARIABLE = re.compile(r"^\$\{(.+)\}$")


def _device_tuple(name: str) -> tuple[str, str, str]:
    parts = name.split("/", 2)
    if len(parts) == 1:
        return "", parts[0], ""
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return parts[0], parts[1], parts[2]


def _resolve_device(group: DeviceGroup, target: str) -> str | Value | None:
    match = _VARIABLE.match(target or "")
    if not match:
        return target
    name = match.group(1)
    if name == "device.ids":
        return ",".join(group.ids)
    if name == "device.model":
        return group.name
    if name == "device.vendor":
        return group.vendor
    if name == "device.type":
        return group.type
    if name.startswith("device.attr."):
        attr = group.attributes.get(name[len("device.attr.") :])
        return from_attribute(attr) if attr is not None else None
    return None


def group_matches(group: DeviceGroup, request: dict[str, Any]) -> bool:
    vendor, dtype, name = _device_tuple(request.get("Name") or "")
    if dtype and dtype != group.type:
        return False
    if vendor and vendor != group.vendor:
        return False
    if name and name != group.name:
        return False
    for c in request.get("Constraints") or []:
        ltarget, operand, rtarget = (
            c.get("LTarget", ""),
            c.get("Operand") or "=",
            c.get("RTarget", ""),
        )
        if ltarget == "${device.ids}" and operand in ("=", "==", "is"):
            operand = "set_contains"  # a single id, or a list, all in this group
        if not satisfies(
            _resolve_device(group, ltarget), operand, _resolve_device_r(group, rtarget)
        ):
            return False
    return True


def _resolve_device_r(group: DeviceGroup, target: str) -> str:
    value = _resolve_device(group, target)
    if isinstance(value, Value):
        return value.text or ""
    return value or ""


def instance_allowed(instance_id: str, request: dict[str, Any]) -> bool:
    """Since Nomad 1.6.2 (GH-18141) each chosen instance must itself satisfy `${device.ids}`."""
    for c in request.get("Constraints") or []:
        if c.get("LTarget") != "${device.ids}":
            continue
        ids = split_set(c.get("RTarget") or "")
        operand = c.get("Operand") or "="
        if operand in _ID_OPERANDS_IN and instance_id not in ids:
            return False
        if operand in _ID_OPERANDS_OUT and instance_id in ids:
            return False
    return True


def candidates(group: DeviceGroup, request: dict[str, Any], used: set[str]) -> list[str]:
    return [
        i.id
        for i in group.instances
        if i.healthy and i.id not in used and instance_allowed(i.id, request)
    ]


def affinity_score(group: DeviceGroup, request: dict[str, Any]) -> float:
    total, weights = 0.0, 0.0
    for a in request.get("Affinities") or []:
        weight = float(a.get("Weight") or 50)
        weights += abs(weight)
        left = _resolve_device(group, a.get("LTarget", ""))
        if satisfies(left, a.get("Operand") or "=", a.get("RTarget", "")):
            total += weight
    return total / weights if weights else 0.0
