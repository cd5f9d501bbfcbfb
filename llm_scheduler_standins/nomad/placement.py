"""A small Nomad-like placement for one task group allocation: feasibility, then ranking.

Feasibility (counted in ConstraintFiltered): node status and eligibility, datacenter, node
pool, job/group/task constraints on node variables, the group's host volumes ("missing
compatible host volumes", Nomad's HostVolumeChecker), then `device` requests against
healthy instances regardless of use ("missing devices"). Ranking (DimensionExhausted): CPU, cores,
memory, reserved ports and free device instances ("devices: no devices match request").
A device request is met from one group; instances are exclusive; the pick among free ones is
random, as it is in Nomad.
"""

from __future__ import annotations

import fnmatch
import random
import re
from dataclasses import dataclass, field
from typing import Any

from llm_scheduler_standins.fleet_model import Node
from llm_scheduler_standins.nomad.constraints import constraint_text, satisfies
from llm_scheduler_standins.nomad.device_matching import (
    affinity_score,
    candidates,
    group_matches,
    instance_allowed,
)
from llm_scheduler_standins.nomad.fingerprint import DeviceGroup
from llm_scheduler_standins.nomad.nodes import host_volumes

MISSING_DEVICES = "missing devices"
MISSING_HOST_VOLUMES = "missing compatible host volumes"
NO_DEVICES_MATCH = "devices: no devices match request"
ZERO_DEVICES = "devices: invalid request of zero devices"
PORT_RANGE = (20000, 32000)
_VARIABLE = re.compile(r"^\$\{(.+)\}$")


@dataclass
class NodeView:
    """A node as the placement sees it: its fingerprint plus what is already in use."""

    node: Node
    node_class: str
    status: str
    eligible: bool
    region: str
    attributes: dict[str, str]
    meta: dict[str, str]
    groups: list[DeviceGroup]
    cpu_shares: int
    mhz_per_core: int
    memory_mb: int
    used_shares: int = 0  # starts at the node's reserved shares
    used_cores: int = 0
    used_memory_mb: int = 0
    used_devices: set[str] = field(default_factory=set)
    used_ports: set[int] = field(default_factory=set)
    job_allocs: dict[str, int] = field(default_factory=dict)  # "job" / "job/group" -> count

    def resolve(self, target: str) -> str | None:
        match = _VARIABLE.match(target or "")
        if not match:
            return target
        name = match.group(1)
        fixed = {
            "node.unique.id": self.node.id,
            "node.unique.name": self.node.name,
            "node.datacenter": self.node.datacenter,
            "node.region": self.region,
            "node.class": self.node_class,
            "node.pool": self.node.pool,
        }
        if name in fixed:
            return fixed[name]
        if name.startswith("attr."):
            return self.attributes.get(name[5:])
        if name.startswith("meta."):
            return self.meta.get(name[5:])
        return None


@dataclass
class TaskDevices:
    task: str
    devices: list[dict[str, Any]]


@dataclass
class Placement:
    node: NodeView
    task_devices: list[TaskDevices]
    shares: int
    cores: int
    memory_mb: int
    ports: list[dict[str, Any]]
    score: float


@dataclass
class Metrics:
    """Nomad's AllocationMetric for a failed placement."""

    nodes_evaluated: int = 0
    nodes_filtered: int = 0
    nodes_in_pool: int = 0
    nodes_exhausted: int = 0
    nodes_available: dict[str, int] = field(default_factory=dict)
    constraint_filtered: dict[str, int] = field(default_factory=dict)
    dimension_exhausted: dict[str, int] = field(default_factory=dict)
    coalesced_failures: int = 0

    def filtered(self, reason: str) -> None:
        self.nodes_filtered += 1
        self.constraint_filtered[reason] = self.constraint_filtered.get(reason, 0) + 1

    def exhausted(self, reason: str) -> None:
        self.nodes_exhausted += 1
        self.dimension_exhausted[reason] = self.dimension_exhausted.get(reason, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "AllocationTime": 41000,
            "ClassExhausted": None,
            "ClassFiltered": None,
            "CoalescedFailures": self.coalesced_failures,
            "ConstraintFiltered": self.constraint_filtered or None,
            "DimensionExhausted": self.dimension_exhausted or None,
            "NodesAvailable": self.nodes_available,
            "NodesEvaluated": self.nodes_evaluated,
            "NodesExhausted": self.nodes_exhausted,
            "NodesFiltered": self.nodes_filtered,
            "NodesInPool": self.nodes_in_pool,
            "QuotaExhausted": None,
            "ResourcesExhausted": None,
            "ScoreMetaData": None,
            "Scores": None,
        }


def _constraints_of(job: dict[str, Any], group: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(job.get("Constraints") or []) + list(group.get("Constraints") or [])
    for task in group.get("Tasks") or []:
        found += list(task.get("Constraints") or [])
    return found


def _has_host_volumes(node: Node, group: dict[str, Any]) -> bool:
    """Nomad's rule: every host volume the group asks for is on the node by its source name,
    and a read-only volume takes read-only requests only. (per_alloc, which appends the
    allocation's index to the source, is not modelled: the plain source is looked up.)"""
    offered = host_volumes(node)
    for request in (group.get("Volumes") or {}).values():
        if request.get("Type") != "host":
            continue
        volume = offered.get(request.get("Source") or "")
        if volume is None or (volume.read_only and not request.get("ReadOnly")):
            return False
    return True


def _node_feasible(
    view: NodeView, job: dict[str, Any], group: dict[str, Any], metrics: Metrics
) -> bool:
    for c in _constraints_of(job, group):
        operand = c.get("Operand") or "="
        if operand == "distinct_hosts":
            key = (
                job["ID"] if c in (job.get("Constraints") or []) else f"{job['ID']}/{group['Name']}"
            )
            if view.job_allocs.get(key, 0):
                metrics.filtered("distinct_hosts")  # as Nomad names this filter
                return False
            continue
        if operand == "distinct_property":
            continue
        if not satisfies(view.resolve(c.get("LTarget", "")), operand, c.get("RTarget") or ""):
            metrics.filtered(constraint_text(c))
            return False
    if not _has_host_volumes(view.node, group):
        metrics.filtered(MISSING_HOST_VOLUMES)
        return False
    for task in group.get("Tasks") or []:
        for request in task["Resources"].get("Devices") or []:
            healthy_enough = any(
                group_matches(g, request)
                and sum(1 for i in g.instances if i.healthy and instance_allowed(i.id, request))
                >= int(request.get("Count", 1))
                for g in view.groups
            )
            if not healthy_enough:
                metrics.filtered(MISSING_DEVICES)
                return False
    return True


def _assign_devices(
    view: NodeView, group: dict[str, Any], rng: random.Random, short_devices: bool = False
) -> list[TaskDevices] | str:
    taken: set[str] = set(view.used_devices)
    result: list[TaskDevices] = []
    for task in group.get("Tasks") or []:
        assigned: list[dict[str, Any]] = []
        for request in task["Resources"].get("Devices") or []:
            count = int(request.get("Count", 1))
            if count == 0:
                return ZERO_DEVICES
            options = [
                (g, ids)
                for g in view.groups
                if group_matches(g, request)
                for ids in [candidates(g, request, taken)]
                if len(ids) >= count
            ]
            if not options and short_devices:
                # Nomad 1.9.0 to 1.11.0: with `${device.ids}` wishes, a busy wished instance
                # was skipped and the allocation placed with fewer instances than its count
                # (fixed in 1.11.1). Emulated only when the stand-in is told to.
                options = [
                    (g, ids)
                    for g in view.groups
                    if group_matches(g, request)
                    for ids in [candidates(g, request, taken)]
                    if ids
                ]
                count = min(count, *(len(ids) for _, ids in options)) if options else count
            if not options:
                return NO_DEVICES_MATCH
            best = max(affinity_score(g, request) for g, _ in options)
            ties = [(g, ids) for g, ids in options if affinity_score(g, request) == best]
            chosen_group, ids = rng.choice(ties)
            chosen = sorted(rng.sample(ids, count))
            taken.update(chosen)
            assigned.append(
                {
                    "Vendor": chosen_group.vendor,
                    "Type": chosen_group.type,
                    "Name": chosen_group.name,
                    "DeviceIDs": chosen,
                }
            )
        result.append(TaskDevices(task["Name"], assigned))
    return result


def _assign_ports(view: NodeView, group: dict[str, Any]) -> list[dict[str, Any]] | str:
    ports: list[dict[str, Any]] = []
    taken = set(view.used_ports)
    for network in group.get("Networks") or []:
        for port in network.get("ReservedPorts") or []:
            value = int(port.get("Value") or 0)
            if value in taken:
                return "network: reserved port collision"
            taken.add(value)
            ports.append(
                {
                    "Label": port.get("Label", ""),
                    "Value": value,
                    "To": int(port.get("To") or 0),
                    "HostIP": view.attributes.get("unique.network.ip-address", "127.0.0.1"),
                }
            )
        for port in network.get("DynamicPorts") or []:
            value = next(p for p in range(*PORT_RANGE) if p not in taken)
            taken.add(value)
            to = int(port.get("To") or 0)
            ports.append(
                {
                    "Label": port.get("Label", ""),
                    "Value": value,
                    "To": value if to == -1 else to,
                    "HostIP": view.attributes.get("unique.network.ip-address", "127.0.0.1"),
                }
            )
    return ports


def _fit(
    view: NodeView,
    job: dict[str, Any],
    group: dict[str, Any],
    rng: random.Random,
    metrics: Metrics,
    short_devices: bool = False,
) -> Placement | None:
    shares = cores = memory = 0
    for task in group.get("Tasks") or []:
        res = task["Resources"]
        task_cores = int(res.get("Cores") or 0)
        cores += task_cores
        shares += task_cores * view.mhz_per_core if task_cores else int(res.get("CPU") or 0)
        memory += int(res.get("MemoryMB") or 0)
    if view.used_cores + cores > int(view.node.cpu_cores):
        metrics.exhausted("cores")
        return None
    if view.used_shares + shares > view.cpu_shares:
        metrics.exhausted("cpu")
        return None
    if view.used_memory_mb + memory > view.memory_mb:
        metrics.exhausted("memory")
        return None
    ports = _assign_ports(view, group)
    if isinstance(ports, str):
        metrics.exhausted(ports)
        return None
    devices = _assign_devices(view, group, rng, short_devices)
    if isinstance(devices, str):
        metrics.exhausted(devices)
        return None
    # Bin-packing score, as Nomad's default algorithm: fuller nodes first.
    score = (
        (view.used_shares + shares) / max(view.cpu_shares, 1)
        + (view.used_memory_mb + memory) / max(view.memory_mb, 1)
    ) / 2
    return Placement(view, devices, shares, cores, memory, ports, score)


def place(
    views: list[NodeView],
    job: dict[str, Any],
    group: dict[str, Any],
    rng: random.Random,
    *,
    short_devices: bool = False,
) -> Placement | Metrics:
    """Choose a node for one allocation of `group`, or say why none fits."""
    metrics = Metrics()
    pool = job.get("NodePool") or "default"
    datacenters = job.get("Datacenters") or ["*"]
    best: Placement | None = None
    for view in views:
        if pool not in ("all", view.node.pool):
            continue
        if not any(fnmatch.fnmatchcase(view.node.datacenter, dc) for dc in datacenters):
            continue
        metrics.nodes_in_pool += 1
        if view.status != "ready" or not view.eligible:
            continue
        dc = view.node.datacenter
        metrics.nodes_available[dc] = metrics.nodes_available.get(dc, 0) + 1
        metrics.nodes_evaluated += 1
        if not _node_feasible(view, job, group, metrics):
            continue
        fit = _fit(view, job, group, rng, metrics, short_devices)
        if fit is not None and (best is None or fit.score > best.score):
            best = fit
    return best if best is not None else metrics


def claim(placement: Placement, job_id: str, group_name: str) -> None:
    """Record a placement's use on its node view, so the next allocation sees it."""
    view = placement.node
    view.used_shares += placement.shares
    view.used_cores += placement.cores
    view.used_memory_mb += placement.memory_mb
    for td in placement.task_devices:
        for device in td.devices:
            view.used_devices.update(device["DeviceIDs"])
    view.used_ports.update(p["Value"] for p in placement.ports)
    for key in (job_id, f"{job_id}/{group_name}"):
        view.job_allocs[key] = view.job_allocs.get(key, 0) + 1
