"""Allocations as the API shows them, and the Consul services a running one registers."""

from __future__ import annotations

import uuid
from typing import Any

from llm_scheduler_standins.nomad import views
from llm_scheduler_standins.nomad.nodes import MHZ_PER_CORE, NodeRecord
from llm_scheduler_standins.nomad.placement import Placement
from llm_scheduler_standins.registry import CheckStatus, ServiceInstance


def build_alloc(
    job: dict[str, Any],
    group: dict[str, Any],
    slot: int,
    placement: Placement,
    eval_id: str,
    index: int,
) -> dict[str, Any]:
    """A new pending allocation of `group` where `placement` put it."""
    alloc_id = str(uuid.uuid4())
    node = placement.node
    tasks = _task_resources(group, placement)
    disk = int((group.get("EphemeralDisk") or {}).get("SizeMB") or 300)
    ports = placement.ports or None
    shared_networks = _shared_networks(group, placement) if ports else None
    now = views.now_ns()
    alloc = {
        "ID": alloc_id,
        "Namespace": job["Namespace"],
        "EvalID": eval_id,
        "Name": f"{job['ID']}.{group['Name']}[{slot}]",
        "NodeID": node.node.id,
        "NodeName": node.node.name,
        "JobID": job["ID"],
        "JobType": job["Type"],
        "JobVersion": job["Version"],
        "Job": views.jcopy(job),
        "TaskGroup": group["Name"],
        **_resource_fields(tasks, disk, shared_networks, ports),
        "Metrics": _metrics(placement),
        "DesiredStatus": "run",
        "DesiredDescription": "",
        "DesiredTransition": {"ForceReschedule": None, "Migrate": None, "Reschedule": None},
        "ClientStatus": "pending",
        "ClientDescription": "No tasks have started",
        "TaskStates": {
            t["Name"]: views.task_state(
                "pending", [views.task_event("Received", "", "Task received by client")]
            )
            for t in group["Tasks"]
        },
        "DeploymentID": "",
        "DeploymentStatus": None,
        "FollowupEvalID": "",
        "PreviousAllocation": "",
        "NextAllocation": "",
        "RescheduleTracker": None,
        "PreemptedAllocations": None,
        "PreemptedByAllocation": "",
        "AllocModifyIndex": index,
        "CreateIndex": index,
        "ModifyIndex": index,
        "CreateTime": now,
        "ModifyTime": now,
    }
    return alloc


def _resource_fields(
    tasks: dict[str, Any],
    disk: int,
    shared_networks: list[dict[str, Any]] | None,
    ports: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """Resources, SharedResources, TaskResources (the older fields) and AllocatedResources."""
    return {
        "Resources": {
            "CPU": sum(t["Cpu"]["CpuShares"] for t in tasks.values()),
            "MemoryMB": sum(t["Memory"]["MemoryMB"] for t in tasks.values()),
            "DiskMB": disk,
            "Networks": shared_networks,
        },
        "SharedResources": {
            "CPU": 0,
            "MemoryMB": 0,
            "DiskMB": disk,
            "Networks": shared_networks,
        },
        "TaskResources": {
            name: {
                "CPU": t["Cpu"]["CpuShares"],
                "MemoryMB": t["Memory"]["MemoryMB"],
                "DiskMB": 0,
                "Networks": None,
                "Devices": t["Devices"],
            }
            for name, t in tasks.items()
        },
        "AllocatedResources": {
            "Tasks": tasks,
            "TaskLifecycles": {name: None for name in tasks},
            "Shared": {"DiskMB": disk, "Networks": shared_networks, "Ports": ports},
        },
    }


def _task_resources(group: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """AllocatedResources.Tasks: each task's CPU (shares, or the cores reserved for it),
    memory and devices."""
    devices = {td.task: td.devices for td in placement.task_devices}
    node = placement.node
    tasks: dict[str, Any] = {}
    core_cursor = iter(range(node.used_cores - placement.cores, node.used_cores))
    for task in group["Tasks"]:
        res = task["Resources"]
        cores = int(res.get("Cores") or 0)
        tasks[task["Name"]] = {
            "Cpu": {
                "CpuShares": cores * MHZ_PER_CORE if cores else int(res.get("CPU") or 0),
                "ReservedCores": [next(core_cursor) for _ in range(cores)] or None,
            },
            "Memory": {
                "MemoryMB": int(res.get("MemoryMB") or 0),
                "MemoryMaxMB": int(res.get("MemoryMaxMB") or 0),
            },
            "Networks": None,
            "Devices": devices.get(task["Name"]) or None,
        }
    return tasks


def _shared_networks(group: dict[str, Any], placement: Placement) -> list[dict[str, Any]]:
    """The group network with the ports the placement gave, at the node's address."""
    ip = placement.node.attributes.get("unique.network.ip-address", "127.0.0.1")
    return [
        {
            "Mode": (group.get("Networks") or [{}])[0].get("Mode") or "host",
            "IP": ip,
            "Device": "eth0",
            "CIDR": "",
            "MBits": 0,
            "DNS": None,
            "ReservedPorts": None,
            "DynamicPorts": [
                {
                    "Label": p["Label"],
                    "Value": p["Value"],
                    "To": p["To"],
                    "HostNetwork": "default",
                }
                for p in placement.ports
            ],
        }
    ]


def _metrics(placement: Placement) -> dict[str, Any]:
    """AllocMetric of a placement that found its node at once."""
    node = placement.node
    return {
        "NodesEvaluated": 1,
        "NodesFiltered": 0,
        "NodesInPool": 1,
        "NodesAvailable": {node.node.datacenter: 1},
        "ClassFiltered": None,
        "ConstraintFiltered": None,
        "NodesExhausted": 0,
        "ClassExhausted": None,
        "DimensionExhausted": None,
        "QuotaExhausted": None,
        "ResourcesExhausted": None,
        "Scores": {f"{node.node.id}.binpack": round(placement.score, 6)},
        "ScoreMetaData": None,
        "AllocationTime": 35000,
        "CoalescedFailures": 0,
    }


def service_instances(
    alloc: dict[str, Any], record: NodeRecord, check_status: CheckStatus = "passing"
) -> list[ServiceInstance]:
    """What a Nomad client registers in Consul for a running allocation."""
    job = alloc["Job"]
    group = next(g for g in job["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
    ports = {p["Label"]: p for p in alloc["AllocatedResources"]["Shared"]["Ports"] or []}
    found: list[tuple[str, dict[str, Any]]] = [
        (f"group-{group['Name']}", s) for s in group.get("Services") or []
    ]
    for task in group["Tasks"]:
        found += [(task["Name"], s) for s in task.get("Services") or []]
    instances = []
    for owner, service in found:
        if (service.get("Provider") or "consul") != "consul":
            continue
        label = service.get("PortLabel") or ""
        port = ports.get(label)
        # Nomad's GetAddress (address_mode auto/host): a port label is registered at that
        # port's HostIP and value; a bare number at "" (Consul then uses the node's address).
        address = record.address
        if port is not None:
            number, address = int(port["Value"]), str(port.get("HostIP") or record.address)
        elif label.isdigit():
            number, address = int(label), ""
        else:
            number = 0
        meta = {"external-source": "nomad", **(service.get("Meta") or {})}
        instances.append(
            ServiceInstance(
                id=f"_nomad-task-{alloc['ID']}-{owner}-{service['Name']}-{label}",
                name=service["Name"],
                node_id=record.node.id,
                node_name=record.node.name,
                address=address,
                port=number,
                tags=tuple(service.get("Tags") or ()),
                meta={str(k): str(v) for k, v in meta.items()},
                check_status=check_status,
            )
        )
    return instances


# ------------------------------------------------------------ allocations
