"""The fake GPUs behind FakeNvml: GPUs, their MIG instances and NVLinks, and ready-made fleets
(an H100 box, an H200 box, A100s with and without MIG, a failing one)."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field

from scheduler.core.mig_geometry import GpuGeometry, geometry_for
from scheduler.core.models import Node

# nvidia-smi "Profile ID" per NVML enum, as on the A100/H100 (NVIDIA MIG User Guide, "Supported
# MIG Profiles").
# Real code reads these from NVML; the fake has to answer something.
PROFILE_IDS = {
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE": 19,
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1": 20,
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2": 15,
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE": 14,
    "NVML_GPU_INSTANCE_PROFILE_3_SLICE": 9,
    "NVML_GPU_INSTANCE_PROFILE_4_SLICE": 5,
    "NVML_GPU_INSTANCE_PROFILE_7_SLICE": 0,
}
GIB = 1024**3


def stable_uuid(seed: str) -> str:
    """Stable, real-looking UUIDs, so fleets are the same in every run."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"fake-nvml:{seed}"))


@dataclass
class FakeLink:
    remote_bus_id: str  # NVML spelling, e.g. 00000000:08:00.0
    active: bool = True
    to_switch: bool = False


@dataclass
class FakeGpuInstance:
    """A GPU instance; with a compute instance it is also a MIG device (handle for Get* calls)."""

    gpu: FakeGpu
    gi_id: int
    profile: str
    profile_id: int
    start: int
    size: int
    uuid: str
    has_compute: bool = True
    ci_id: int = 0
    memory_used: int = 0
    processes: list[int] = field(default_factory=list)


@dataclass
class FakeComputeInstance:
    gi: FakeGpuInstance


@dataclass
class FakeGpu:
    uuid: str
    name: str
    pci_bus_id: str
    memory_total: int
    memory_used: int = 0
    util_gpu: int = 0
    util_memory: int = 0
    mig_capable: bool = True
    mig_enabled: bool = False
    instances: list[FakeGpuInstance] = field(default_factory=list)
    links: list[FakeLink] = field(default_factory=list)
    ecc_uncorrected: int | None = 0  # None: ECC counters not supported
    lost: bool = False
    processes: list[int] = field(default_factory=list)

    @property
    def geometry(self) -> GpuGeometry | None:
        return geometry_for(self.name)

    def mig_devices(self) -> list[FakeGpuInstance]:
        return [gi for gi in self.instances if gi.has_compute]

    def add_instance(self, profile: str, start: int, *, uuid: str | None = None) -> FakeGpuInstance:
        geometry = self.geometry
        spec = geometry.profile(profile) if geometry else None
        if spec is None:
            raise ValueError(f"{profile} is not a profile of {self.name}")
        gi_id = max((gi.gi_id for gi in self.instances), default=0) + 1
        gi = FakeGpuInstance(
            gpu=self,
            gi_id=gi_id,
            profile=profile,
            profile_id=PROFILE_IDS[spec.nvml_enum],
            start=start,
            size=spec.memory_slices,
            uuid=uuid or f"MIG-{stable_uuid(f'{self.uuid}/{gi_id}/{start}/{profile}')}",
        )
        self.instances.append(gi)
        return gi


def _uuid(prefix: str, index: int) -> str:
    return f"GPU-{stable_uuid(f'{prefix}/{index}')}"


def _bus(index: int) -> str:
    return f"00000000:{index + 7:02X}:00.0"


def _fleet(name: str, memory_gib: int, count: int, prefix: str, *, switch: bool) -> list[FakeGpu]:
    gpus = [
        FakeGpu(
            uuid=_uuid(prefix, i),
            name=name,
            pci_bus_id=_bus(i),
            memory_total=memory_gib * GIB,
            memory_used=GIB // 2,
            util_gpu=10 * i,
            util_memory=5 * i,
        )
        for i in range(count)
    ]
    for gpu in gpus:
        if switch:  # HGX boards: every link goes to an NVSwitch
            gpu.links = [FakeLink("00000000:00:00.0", to_switch=True) for _ in range(4)]
        else:  # pairs bridged directly: 0-1, 2-3, ...
            index = gpus.index(gpu)
            partner = gpus[index ^ 1] if index ^ 1 < count else None
            if partner is not None:
                gpu.links = [
                    FakeLink(partner.pci_bus_id),
                    FakeLink(partner.pci_bus_id, active=False),
                ]
    return gpus


def h100_fleet(count: int = 8) -> list[FakeGpu]:
    """An HGX H100 node: NVSwitch-connected, MIG off."""
    return _fleet("NVIDIA H100 80GB HBM3", 80, count, "h100", switch=True)


def h200_fleet(count: int = 8) -> list[FakeGpu]:
    return _fleet("NVIDIA H200", 141, count, "h200", switch=True)


def a100_fleet(count: int = 4, *, memory_gib: int = 40) -> list[FakeGpu]:
    """PCIe A100s with NVLink bridges between pairs, MIG off."""
    return _fleet(f"NVIDIA A100-PCIE-{memory_gib}GB", memory_gib, count, "a100", switch=False)


def a100_mig_fleet() -> list[FakeGpu]:
    """Two A100-SXM4-80GB: GPU 0 whole, GPU 1 in MIG mode as 3g.40gb x2."""
    gpus = _fleet("NVIDIA A100-SXM4-80GB", 80, 2, "a1m", switch=False)
    gpus[1].mig_enabled = True
    gpus[1].add_instance("3g.40gb", 0)
    gpus[1].add_instance("3g.40gb", 4)
    return gpus


def failing_fleet() -> list[FakeGpu]:
    """Four H100s: GPU 1 has uncorrected ECC errors, GPU 2 has no ECC counters, GPU 3 is lost.
    Inject an XID with FakeNvml.inject_xid once the probe has registered for events."""
    gpus = h100_fleet(4)
    gpus[1].ecc_uncorrected = 3
    gpus[2].ecc_uncorrected = None
    gpus[3].lost = True
    return gpus


def fleet_for_node(node: Node) -> list[FakeGpu]:
    """A fake fleet that looks, through NVML, like `node` looks through Nomad: whole GPUs keep
    their UUIDs, a MIG parent with a `pci-<bus>` id gets that bus id and its slices' MIG UUIDs,
    and nvlink_peers become direct links. For end-to-end tests that write real reporter records
    for a stand-in Nomad node:

        fake = FakeNvml(fleet_for_node(node)); probe = NvmlProbe(node.id, nvml=fake)
        probe.open(); fake.inject_xid(0, 79)   # then ReportWriter(...).publish(probe.read())
    """
    from scheduler.core.mig_geometry import Layout, plan_layout
    from scheduler.reporter.record import normalize_pci_bus_id

    gpus: list[FakeGpu] = []
    for index, gpu in enumerate(node.gpus):
        bus = normalize_pci_bus_id(gpu.id) if gpu.id.lower().startswith("pci-") else None
        fake = FakeGpu(
            uuid=gpu.id if bus is None else f"GPU-{stable_uuid(f'{node.id}/{gpu.id}')}",
            name=gpu.model,
            pci_bus_id=f"0000{bus}".upper() if bus else _bus(index),  # NVML's 8-digit domain
            memory_total=int(gpu.memory_gb * GIB),
            mig_enabled=gpu.mig is not None,
        )
        if gpu.mig:
            want: dict[str, int] = {}
            for mig_slice in gpu.mig:
                want[mig_slice.profile] = want.get(mig_slice.profile, 0) + 1
            layout = plan_layout(gpu.model, want)
            starts: dict[str, list[int]] = {}
            if isinstance(layout, Layout):
                for inst in layout.instances:
                    starts.setdefault(inst.profile, []).append(inst.start)
            for mig_slice in gpu.mig:
                free = starts.get(mig_slice.profile) or [0]
                start = free.pop(0)
                if fake.geometry is not None and fake.geometry.profile(mig_slice.profile):
                    fake.add_instance(mig_slice.profile, start, uuid=mig_slice.id)
        gpus.append(fake)
    by_id = {g.id: fake for g, fake in zip(node.gpus, gpus, strict=True)}
    for gpu, fake in zip(node.gpus, gpus, strict=True):
        fake.links = [FakeLink(by_id[p].pci_bus_id) for p in gpu.nvlink_peers if p in by_id]
    return gpus
