"""Nomad node JSON (NVIDIA device plugin fingerprints) into snapshot Nodes.

A GPU in MIG mode is hidden by the plugin: only its slices appear, one device group per
profile named `<parent name> MIG <profile>`. Slices are grouped back into one parent GPU by
their PCI bus id, and that parent gets the derived id `pci-<bus id>`.

Node and device ids, GPU model names, pools and datacenters are interned (interning.py): a
shard's node id and device ids are then the very objects the nodes hold, and one GPU model's
name is one object across the fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.adapters.interning import intern
from scheduler.core.models import GPU, MigSlice, Node

MIG_MARK = " MIG "
MIB_PER_GB = 1024


def _bus_id(instance: dict[str, Any]) -> str:
    raw = str(((instance.get("Locality") or {}).get("PciBusID")) or "")
    return raw.replace("\x00", "").strip()


def _memory_gb(group: dict[str, Any]) -> float:
    attr = (group.get("Attributes") or {}).get("memory") or {}
    value = attr.get("Int")
    if value is None:
        value = attr.get("Float")
    if value is None:
        return 0.0
    unit = str(attr.get("Unit") or "MiB")
    factor = {"MiB": 1 / MIB_PER_GB, "GiB": 1.0, "MB": 1 / 1000, "GB": 1.0}.get(unit, 1 / 1024)
    return round(float(value) * factor, 2)


def parent_gpu_id(bus_id: str) -> str:
    return f"pci-{bus_id}"


def gpus_from_devices(devices: list[dict[str, Any]] | None) -> list[GPU]:
    whole: list[GPU] = []
    parents: dict[str, tuple[str, list[MigSlice]]] = {}
    for group in devices or []:
        if group.get("Vendor") != "nvidia" or group.get("Type") != "gpu":
            continue
        name = intern(str(group.get("Name") or "N/A"))
        memory = _memory_gb(group)
        for inst in group.get("Instances") or []:
            healthy = bool(inst.get("Healthy", True))
            if MIG_MARK in name:
                parent_name, profile = name.rsplit(MIG_MARK, 1)
                bus = _bus_id(inst) or str(inst.get("ID"))
                slices = parents.setdefault(bus, (parent_name, []))[1]
                slices.append(
                    MigSlice(
                        id=intern(str(inst["ID"])),
                        profile=intern(profile),
                        memory_gb=memory,
                        healthy=healthy,
                    )
                )
            else:
                gpu_id = intern(str(inst["ID"]))
                whole.append(GPU(id=gpu_id, model=name, memory_gb=memory, healthy=healthy))
    for bus, (parent_name, slices) in sorted(parents.items()):
        total = sum(s.memory_gb for s in slices)
        gpu = GPU(
            id=intern(parent_gpu_id(bus)),
            model=intern(parent_name),
            memory_gb=total,
            healthy=all(s.healthy for s in slices),
            mig=sorted(slices, key=lambda s: s.id),
        )
        whole.append(gpu)
    return sorted(whole, key=lambda g: g.id)


def cpu_cores(resources: dict[str, Any]) -> float:
    cpu = resources.get("Cpu") or {}
    cores = cpu.get("TotalCpuCores")
    if cores:
        return float(cores)
    # Older clients report only MHz shares; assume a nominal 2.5 GHz per core.
    shares = cpu.get("CpuShares") or 0
    return round(float(shares) / 2500, 2)


def draining(body: dict[str, Any]) -> bool:
    """A drain runs while DrainStrategy is set; `Drain` is its older flag (both in 1.x)."""
    return bool(body.get("Drain")) or body.get("DrainStrategy") is not None


def node_from_nomad(body: dict[str, Any]) -> Node:
    """One Node from GET /v1/node/:id; not ready, draining or ineligible means ineligible.

    cpu_cores and memory_gb are what the node offers less its ReservedResources (Nomad's
    scheduler subtracts them too, nomad/structs/funcs.go AllocsFit)."""
    res = body.get("NodeResources") or {}
    memory_mb = (res.get("Memory") or {}).get("MemoryMB") or 0
    reserved = body.get("ReservedResources") or {}
    reserved_mb = _number((reserved.get("Memory") or {}).get("MemoryMB"))
    reserved_shares = _number((reserved.get("Cpu") or {}).get("CpuShares"))
    cores = cpu_cores(res)
    eligible = (
        body.get("SchedulingEligibility", "eligible") == "eligible"
        and body.get("Status", "ready") == "ready"
        and not draining(body)
    )
    attributes = body.get("Attributes") or {}
    return Node(
        id=intern(str(body["ID"])),
        name=str(body.get("Name") or body["ID"]),
        # Where other shards of a multi-node replica reach this one (its head, at rank 0).
        address=str(attributes.get("unique.network.ip-address") or ""),
        pool=intern(str(body.get("NodePool") or "default")),
        datacenter=intern(str(body.get("Datacenter") or "dc1")),
        eligible=eligible,
        draining=draining(body),
        cpu_cores=max(0.0, round(cores - reserved_shares / shares_per_core(res), 2)),
        memory_gb=max(0.0, round((float(memory_mb) - reserved_mb) / MIB_PER_GB, 2)),
        gpus=gpus_from_devices(res.get("Devices")),
        # Node.Meta: a flat map of strings (GET /v1/node/:node_id): rack, zone, ...
        meta={str(k): str(v) for k, v in (body.get("Meta") or {}).items()},
        host_volumes=writable_host_volumes(body.get("HostVolumes")),
    )


def writable_host_volumes(volumes: Any) -> list[str]:
    """Node.HostVolumes (name -> {Name, Path, ReadOnly, ID}) a replica may mount writable:
    Nomad refuses a read-write request for a read-only volume, so those are left out."""
    if not isinstance(volumes, dict):
        return []
    return sorted(
        str(name)
        for name, volume in volumes.items()
        if isinstance(volume, dict) and not volume.get("ReadOnly")
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def shares_per_core(resources: dict[str, Any]) -> float:
    """MHz of one core, to turn CPU shares into cores (2.5 GHz when the node does not say)."""
    cpu = resources.get("Cpu") or {}
    shares, cores = _number(cpu.get("CpuShares")), _number(cpu.get("TotalCpuCores"))
    return shares / cores if shares > 0 and cores > 0 else 2500.0


@dataclass
class Usage:
    """What allocations that are not the scheduler's replicas hold on one node."""

    cpu_shares: float = 0.0
    memory_mb: float = 0.0
    devices: set[str] = field(default_factory=set)


def alloc_usage(alloc: dict[str, Any], usage: Usage) -> None:
    """Add one allocation's AllocatedResources (from a `?resources=true` listing) to `usage`."""
    tasks = ((alloc.get("AllocatedResources") or {}).get("Tasks")) or {}
    for task in tasks.values():
        task = task or {}
        usage.cpu_shares += _number((task.get("Cpu") or {}).get("CpuShares"))
        usage.memory_mb += _number((task.get("Memory") or {}).get("MemoryMB"))
        for dev in task.get("Devices") or []:
            usage.devices.update(intern(str(x)) for x in dev.get("DeviceIDs") or [])


def less_usage(node: Node, usage: Usage | None, mhz_per_core: float) -> Node:
    """The node as the scheduler may use it: other allocations' CPU and memory left out,
    their devices held."""
    if usage is None:
        return node
    return node.model_copy(
        update={
            "cpu_cores": max(0.0, round(node.cpu_cores - usage.cpu_shares / mhz_per_core, 2)),
            "memory_gb": max(0.0, round(node.memory_gb - usage.memory_mb / MIB_PER_GB, 2)),
            "held": sorted(usage.devices),
        }
    )
