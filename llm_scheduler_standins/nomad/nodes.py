"""Nomad client nodes as the API shows them: attributes, drivers, resources, devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llm_scheduler_standins.fleet_model import HostVolume, ModelCache, Node
from llm_scheduler_standins.nomad.fingerprint import (
    DeviceGroup,
    device_groups,
    devices_json,
    nvlink_groups,
)

MHZ_PER_CORE = 2400
NOMAD_VERSION = "1.10.5"


@dataclass
class NodeRecord:
    node: Node
    address: str
    eligible: bool
    status: str = "ready"
    health: dict[str, bool] = field(default_factory=dict)
    create_index: int = 1
    modify_index: int = 1
    last_drain: dict[str, Any] | None = None
    # ReservedResources (client `reserved` block): kept from every placement on the node.
    reserved_cpu_shares: int = 0
    reserved_memory_mb: int = 0
    reserved_ports: str = ""  # host ports no allocation may take ("22,8000-8010")
    drain_strategy: dict[str, Any] | None = None  # while a drain runs

    @property
    def node_class(self) -> str:
        # The fleet has no class; GPU clients are commonly given one, and jobspecs/ relies on it.
        return "gpu" if self.node.gpus else ""

    def groups(self) -> list[DeviceGroup]:
        return device_groups(self.node, self.health)

    def attributes(self) -> dict[str, str]:
        n = self.node
        cores = int(n.cpu_cores)
        return {
            "consul.datacenter": n.datacenter,
            "consul.revision": "b9d1b6a8",
            "consul.server": "false",
            "consul.version": "1.20.1",
            "cpu.arch": "amd64",
            "cpu.frequency": str(MHZ_PER_CORE),
            "cpu.modelname": "AMD EPYC 9654 96-Core Processor",
            "cpu.numcores": str(cores),
            "cpu.reservablecores": str(cores),
            "cpu.totalcompute": str(cores * MHZ_PER_CORE),
            "cpu.usablecompute": str(cores * MHZ_PER_CORE),
            "driver.docker": "1",
            "driver.docker.bridge_ip": "172.17.0.1",
            "driver.docker.os_type": "linux",
            "driver.docker.runtimes": "io.containerd.runc.v2,nvidia,runc",
            "driver.docker.version": "27.3.1",
            "driver.docker.volumes.enabled": "true",
            "driver.exec": "1",
            "kernel.name": "linux",
            "kernel.version": "6.8.0-49-generic",
            "memory.totalbytes": str(int(n.memory_gb * (1 << 30))),
            "nomad.revision": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
            "nomad.version": NOMAD_VERSION,
            "os.name": "ubuntu",
            "os.signals": "SIGHUP,SIGINT,SIGQUIT,SIGKILL,SIGUSR1,SIGUSR2,SIGTERM,SIGCONT",
            "os.version": "24.04",
            "plugins.nvidia-gpu.version": "1.1.0",
            "unique.advertise.address": f"{self.address}:4646",
            "unique.cgroup.mountpoint": "/sys/fs/cgroup",
            "unique.consul.name": n.name,
            "unique.hostname": n.name,
            "unique.network.ip-address": self.address,
            "unique.storage.bytesfree": str(1_500_000 * (1 << 20)),
            "unique.storage.bytestotal": str(1_800_000 * (1 << 20)),
            "unique.storage.volume": "/dev/nvme0n1p2",
        }

    def meta(self) -> dict[str, str]:
        meta = {"connect.log_level": "info", "connect.sidecar_image": "envoyproxy/envoy:v1.31.2"}
        islands = nvlink_groups(self.node)
        if islands:
            meta["nvlink.groups"] = islands
        # The client's `meta { rack = "r1" }` (client config), as Node.Meta carries it.
        meta.update(self.node.meta)
        return meta


def host_volumes(node: Node) -> dict[str, HostVolume]:
    # A test may hand in the scheduler's own nodes as a fleet: those have no volumes.
    return getattr(node, "host_volumes", None) or {}


def model_cache(node: Node) -> ModelCache | None:
    return getattr(node, "model_cache", None)


def host_volumes_json(node: Node) -> dict[str, Any] | None:
    """Node.HostVolumes as GET /v1/node/:id shows it (structs.ClientHostVolumeConfig)."""
    volumes = host_volumes(node)
    if not volumes:
        return None
    return {
        name: {"Name": name, "Path": v.path, "ReadOnly": v.read_only, "ID": v.id}
        for name, v in sorted(volumes.items())
    }


def node_resources(record: NodeRecord) -> dict[str, Any]:
    node = record.node
    cores = int(node.cpu_cores)
    return {
        "Cpu": {
            "CpuShares": cores * MHZ_PER_CORE,
            "TotalCpuCores": cores,
            "ReservableCpuCores": list(range(cores)),
        },
        "Memory": {"MemoryMB": int(node.memory_gb * 1024)},
        "Disk": {"DiskMB": 1_800_000},
        "Networks": [
            {
                "CIDR": f"{record.address}/32",
                "Device": "eth0",
                "DynamicPorts": None,
                "IP": record.address,
                "MBits": 100000,
                "Mode": "host",
                "ReservedPorts": None,
            }
        ],
        "NodeNetworks": [
            {
                "Addresses": [
                    {
                        "Address": record.address,
                        "Alias": "default",
                        "Family": "ipv4",
                        "Gateway": "",
                        "ReservedPorts": "",
                    }
                ],
                "Device": "eth0",
                "MacAddress": "02:42:ac:11:00:02",
                "Mode": "host",
            }
        ],
        "Devices": devices_json(record.groups()) or None,
        "MinDynamicPort": 20000,
        "MaxDynamicPort": 32000,
    }


def _drivers() -> dict[str, Any]:
    def driver(detected: bool, attrs: dict[str, str] | None, why: str = "") -> dict[str, Any]:
        return {
            "Attributes": attrs,
            "Detected": detected,
            "HealthDescription": "Healthy" if detected else why,
            "Healthy": detected,
            "UpdateTime": "2026-12-01T00:00:00.000000000Z",
        }

    return {
        "docker": driver(
            True,
            {
                "driver.docker": "true",
                "driver.docker.bridge_ip": "172.17.0.1",
                "driver.docker.os_type": "linux",
                "driver.docker.runtimes": "io.containerd.runc.v2,nvidia,runc",
                "driver.docker.version": "27.3.1",
                "driver.docker.volumes.enabled": "true",
            },
        ),
        "exec": driver(True, {"driver.exec": "true"}),
        "raw_exec": driver(False, {}, "disabled"),
        "java": driver(False, {}, ""),
        "qemu": driver(False, {}, ""),
    }


def node_stub(record: NodeRecord, *, resources: bool, os_attrs: bool) -> dict[str, Any]:
    node = record.node
    stub: dict[str, Any] = {
        "Address": record.address,
        "CreateIndex": record.create_index,
        "Datacenter": node.datacenter,
        "Drain": record.drain_strategy is not None,
        "Drivers": _drivers(),
        "ID": node.id,
        "LastDrain": record.last_drain,
        "ModifyIndex": record.modify_index,
        "Name": node.name,
        "NodeClass": record.node_class,
        "NodePool": node.pool,
        "SchedulingEligibility": "eligible" if record.eligible else "ineligible",
        "Status": record.status,
        "StatusDescription": "",
        "Version": NOMAD_VERSION,
    }
    if os_attrs:
        stub["Attributes"] = {"os.name": "ubuntu"}
    if resources:
        stub["NodeResources"] = node_resources(record)
        stub["ReservedResources"] = _reserved(record)
    return stub


def _reserved(record: NodeRecord) -> dict[str, Any]:
    return {
        "Cpu": {"CpuShares": record.reserved_cpu_shares},
        "Disk": {"DiskMB": 0},
        "Memory": {"MemoryMB": record.reserved_memory_mb},
        "Networks": {"ReservedHostPorts": record.reserved_ports},
    }


def node_full(record: NodeRecord) -> dict[str, Any]:
    node = record.node
    return {
        "Attributes": record.attributes(),
        "ComputedClass": f"v1:{abs(hash(node.pool + node.datacenter)) % 10**18}",
        "CreateIndex": record.create_index,
        "Datacenter": node.datacenter,
        "Drain": record.drain_strategy is not None,
        "DrainStrategy": record.drain_strategy,
        "Drivers": _drivers(),
        "Events": [
            {
                "CreateIndex": record.create_index,
                "Details": None,
                "Message": "Node registered",
                "Subsystem": "Cluster",
                "Timestamp": "2026-12-01T00:00:00Z",
            }
        ],
        "HTTPAddr": f"{record.address}:4646",
        "HostVolumes": host_volumes_json(node),
        "HostNetworks": None,
        "ID": node.id,
        "LastDrain": record.last_drain,
        "Links": {"consul": f"{node.datacenter}.{node.name}"},
        "Meta": record.meta(),
        "ModifyIndex": record.modify_index,
        "Name": node.name,
        "NodeClass": record.node_class,
        "NodePool": node.pool,
        "NodeResources": node_resources(record),
        "ReservedResources": _reserved(record),
        "SchedulingEligibility": "eligible" if record.eligible else "ineligible",
        "SecretID": "",
        "Status": record.status,
        "StatusDescription": "",
        "StatusUpdatedAt": 1764633600,
        "TLSEnabled": False,
    }
