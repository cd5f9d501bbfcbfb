"""What the NVIDIA device plugin would fingerprint for a fleet node.

One device group per NVML name; a GPU in MIG mode is not offered itself, only its slices,
one group per profile named `<parent> MIG <profile>`, sharing the parent's PCI bus id and its
power/bar1/clock/bandwidth attributes. Group attributes come from the group's first device by
UUID, as in the plugin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_scheduler_standins.fleet_model import GPU, Node
from llm_scheduler_standins.nomad.attributes import int_attr, str_attr

DRIVER_VERSION = "550.54.15"
VENDOR = "nvidia"
DEVICE_TYPE = "gpu"
# Typical PCI bus numbers of an 8-GPU HGX board.
_BUS_NUMBERS = [0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD]


@dataclass(frozen=True)
class GpuSpec:
    power_w: int
    bar1_mib: int
    cores_clock_mhz: int
    memory_clock_mhz: int
    pci_bandwidth_mbs: int


_SPECS: dict[str, GpuSpec] = {
    "H200": GpuSpec(75, 262144, 1980, 2619, 16 * 3072),
    "H100": GpuSpec(72, 131072, 1980, 2619, 16 * 3072),
    "A100": GpuSpec(61, 131072, 1410, 1593, 16 * 2048),
    "L40S": GpuSpec(36, 65536, 2520, 9001, 16 * 2048),
}
_DEFAULT_SPEC = GpuSpec(50, 65536, 1500, 1500, 16 * 2048)


def spec_for(model: str) -> GpuSpec:
    return next((spec for key, spec in _SPECS.items() if key in model), _DEFAULT_SPEC)


@dataclass(frozen=True)
class Instance:
    id: str
    healthy: bool
    health_description: str
    pci_bus_id: str


@dataclass(frozen=True)
class DeviceGroup:
    vendor: str
    type: str
    name: str
    attributes: dict[str, dict[str, Any]]
    instances: tuple[Instance, ...]

    @property
    def ids(self) -> list[str]:
        return [i.id for i in self.instances]


def pci_bus_id(position: int) -> str:
    bus = _BUS_NUMBERS[position] if position < len(_BUS_NUMBERS) else 0x10 + position
    # NVML hands back its whole [32]char buffer; the plugin keeps the NUL padding.
    return f"00000000:{bus:02X}:00.0".ljust(32, "\0")


def _attributes(gpu: GPU, memory_gb: float) -> dict[str, dict[str, Any]]:
    spec = spec_for(gpu.model)
    return {
        "memory": int_attr(round(memory_gb * 1024), "MiB"),
        "power": int_attr(spec.power_w, "W"),
        "bar1": int_attr(spec.bar1_mib, "MiB"),
        "cores_clock": int_attr(spec.cores_clock_mhz, "MHz"),
        "memory_clock": int_attr(spec.memory_clock_mhz, "MHz"),
        "pci_bandwidth": int_attr(spec.pci_bandwidth_mbs, "MB/s"),
        "display_state": str_attr("0"),
        "persistence_mode": str_attr("1"),
        "driver_version": str_attr(DRIVER_VERSION),
    }


def device_groups(node: Node, health: dict[str, bool] | None = None) -> list[DeviceGroup]:
    """The node's device groups; `health` overrides the fleet's health per instance id."""
    health = health or {}
    members: dict[str, list[tuple[Instance, dict[str, dict[str, Any]]]]] = {}
    for position, gpu in enumerate(node.gpus):
        bus = pci_bus_id(position)
        if gpu.mig is None:
            entries = [(gpu.model, gpu.id, gpu.healthy, gpu.memory_gb)]
        else:
            entries = [
                (f"{gpu.model} MIG {s.profile}", s.id, s.healthy, s.memory_gb) for s in gpu.mig
            ]
        for name, dev_id, healthy, memory_gb in entries:
            ok = health.get(dev_id, healthy)
            instance = Instance(dev_id, ok, "" if ok else "unhealthy", bus)
            members.setdefault(name, []).append((instance, _attributes(gpu, memory_gb)))
    groups = []
    for name in sorted(members):
        entries_sorted = sorted(members[name], key=lambda e: e[0].id)
        groups.append(
            DeviceGroup(
                vendor=VENDOR,
                type=DEVICE_TYPE,
                name=name,
                attributes=entries_sorted[0][1],
                instances=tuple(e[0] for e in entries_sorted),
            )
        )
    return groups


def devices_json(groups: list[DeviceGroup]) -> list[dict[str, Any]]:
    return [
        {
            "Vendor": g.vendor,
            "Type": g.type,
            "Name": g.name,
            "Attributes": g.attributes,
            "Instances": [
                {
                    "ID": i.id,
                    "Healthy": i.healthy,
                    "HealthDescription": i.health_description,
                    "Locality": {"PciBusID": i.pci_bus_id},
                }
                for i in g.instances
            ],
        }
        for g in groups
    ]


def nvlink_groups(node: Node) -> str:
    """NVLink islands as `id,id;id,id`: Nomad has no topology attribute, so it goes in Meta."""
    peers = {g.id: set(g.nvlink_peers) for g in node.gpus}
    seen: set[str] = set()
    islands: list[list[str]] = []
    for gpu in node.gpus:
        if gpu.id in seen or not peers[gpu.id]:
            continue
        island, todo = set(), [gpu.id]
        while todo:
            current = todo.pop()
            if current in island:
                continue
            island.add(current)
            todo.extend(peers.get(current, set()))
            todo.extend(other for other, ps in peers.items() if current in ps)
        seen |= island
        islands.append(sorted(island))
    return ";".join(",".join(i) for i in islands)
