"""A fake NVML for tests and demos: an object with the pynvml calls the reporter and `mig apply`
use, under the same names, raising pynvml's own error classes (`pynvml.NVMLError(code)` builds
the matching NVMLError_* subclass, so `except pynvml.NVMLError_NotFound` works as in production).

Constants and error classes come from the real pynvml module (importing it loads no library:
nvidia-ml-py only dlopens libnvidia-ml.so.1 in nvmlInit). Handles are the fake's own objects.

    fake = FakeNvml(a100_mig_fleet())       # or h100_fleet(), h200_fleet(), ...
    fake.inject_xid(0, 79)                  # GPU 0 fell off the bus
    NvmlProbe("node-1", nvml=fake).read()
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml

from scheduler.reporter.fake_gpus import (
    PROFILE_IDS,
    FakeComputeInstance,
    FakeGpu,
    FakeGpuInstance,
    FakeLink,
)


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Module-like stand-in for pynvml over a list of FakeGpu."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        library_missing: bool = False,
        driver_version: str = "550.54.15",
        events_supported: bool = True,
    ) -> None:
        self.gpus = gpus
        self.library_missing = library_missing
        self.driver_version = driver_version
        self.events_supported = events_supported
        self.initialised = 0
        self.pending_events: list[SimpleNamespace] = []
        self.registered: set[str] = set()
        self.calls: list[str] = []  # names of mutating calls, for tests

    def __getattr__(self, name: str) -> Any:
        # Constants, error classes and ctypes structs come from the real module.
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "c_nvml", "nvmlMemory")):
            return getattr(pynvml, name)
        raise AttributeError(f"the fake NVML has no {name}")

    # ------------------------------------------------------------ test controls

    def inject_xid(self, index: int, xid: int, gpu_instance_id: int | None = None) -> None:
        gpu = self.gpus[index]
        if gpu.uuid in self.registered:
            self.pending_events.append(
                SimpleNamespace(
                    device=gpu,
                    eventType=pynvml.nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    gpuInstanceId=0xFFFFFFFF if gpu_instance_id is None else gpu_instance_id,
                    computeInstanceId=0xFFFFFFFF,
                )
            )

    # ------------------------------------------------------------ init

    def _check(self) -> None:
        if not self.initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        if self.library_missing:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver_version

    # ------------------------------------------------------------ devices

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def _gpu(self, handle: Any) -> FakeGpu:
        self._check()
        if not isinstance(handle, FakeGpu):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._check()
        if not isinstance(handle, FakeGpu | FakeGpuInstance):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.uuid  # answered even for a lost GPU, so the probe can name it

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._check()
        if isinstance(handle, FakeGpuInstance):
            return f"{handle.gpu.name} MIG {handle.profile}"
        return self._gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(busId=gpu.pci_bus_id.encode(), busIdLegacy=gpu.pci_bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> SimpleNamespace:
        self._check()
        if isinstance(handle, FakeGpuInstance):
            total = handle.size * handle.gpu.memory_total // 8
            return SimpleNamespace(
                total=total, used=handle.memory_used, free=total - handle.memory_used
            )
        gpu = self._gpu(handle)
        return SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle)
        if gpu.mig_enabled:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle)
        if gpu.ecc_uncorrected is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        return gpu.ecc_uncorrected

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        self._check()
        pids = (
            handle.processes if isinstance(handle, FakeGpuInstance) else self._gpu(handle).processes
        )
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in pids]

    # ------------------------------------------------------------ NVLink

    def _link(self, handle: Any, link: int) -> FakeLink:
        gpu = self._gpu(handle)
        if not gpu.links:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.links):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        return int(self._link(handle, link).active)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        if self._link(handle, link).to_switch:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> SimpleNamespace:
        target = self._link(handle, link)
        bus = "00000000:00:00.0" if target.to_switch else target.remote_bus_id
        return SimpleNamespace(busId=bus.encode())

    # ------------------------------------------------------------ events

    def nvmlEventSetCreate(self) -> list[SimpleNamespace]:
        self._check()
        return self.pending_events

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        gpu = self._gpu(handle)
        if not self.events_supported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if event_types & pynvml.nvmlEventTypeXidCriticalError:
            self.registered.add(gpu.uuid)

    def nvmlEventSetWait(self, event_set: list[SimpleNamespace], timeout_ms: int) -> Any:
        self._check()
        if not event_set:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        return event_set.pop(0)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._check()

    # ------------------------------------------------------------ MIG: reading

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        return 7 if gpu.mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeGpuInstance:
        gpu = self._gpu(handle)
        if not gpu.mig_enabled:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        devices = gpu.mig_devices()
        if not 0 <= index < len(devices):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return devices[index]

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._check()
        if not isinstance(handle, FakeGpuInstance):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        self._check()
        if not isinstance(handle, FakeGpuInstance):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> FakeGpuInstance:
        gpu = self._gpu(handle)
        for gi in gpu.instances:
            if gi.gi_id == gi_id:
                return gi
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gi: FakeGpuInstance) -> SimpleNamespace:
        self._check()
        return SimpleNamespace(
            device=gi.gpu,
            id=gi.gi_id,
            profileId=gi.profile_id,
            placement=SimpleNamespace(start=gi.start, size=gi.size),
        )

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> SimpleNamespace:
        gpu = self._gpu(handle)
        geometry = gpu.geometry
        for name, profile_id in PROFILE_IDS.items():
            if getattr(pynvml, name) != profile:
                continue
            spec = (
                next((p for p in geometry.profiles if p.nvml_enum == name), None)
                if geometry
                else None
            )
            if spec is None:
                break
            return SimpleNamespace(
                id=profile_id,
                sliceCount=spec.compute_slices,
                instanceCount=spec.max_count,
                memorySizeMB=spec.memory_slices * gpu.memory_total // 8 // 2**20,
                name=f"MIG {spec.name}",
            )
        raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # ------------------------------------------------------------ MIG: changing

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: int, placement: Any
    ) -> FakeGpuInstance:
        gpu = self._gpu(handle)
        self.calls.append("nvmlDeviceCreateGpuInstanceWithPlacement")
        placement = getattr(placement, "_obj", placement)  # accept byref(struct) and struct
        if not gpu.mig_enabled:
            raise _error(pynvml.NVML_ERROR_INVALID_STATE)
        geometry = gpu.geometry
        enum = next((n for n, i in PROFILE_IDS.items() if i == profile_id), None)
        spec = (
            next((p for p in geometry.profiles if p.nvml_enum == enum), None) if geometry else None
        )
        if spec is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        start, size = int(placement.start), int(placement.size)
        if start not in spec.starts or size != spec.memory_slices:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        wanted = set(range(start, start + size))
        for gi in gpu.instances:
            if wanted & set(range(gi.start, gi.start + gi.size)):
                raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if sum(1 for gi in gpu.instances if gi.profile == spec.name) >= spec.max_count:
            raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = gpu.add_instance(spec.name, start)
        gi.has_compute = False
        return gi

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: FakeGpuInstance, profile: int, eng_profile: int, version: int = 2
    ) -> SimpleNamespace:
        self._check()
        slices = {
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
        }.get(profile)
        spec = gi.gpu.geometry.profile(gi.profile) if gi.gpu.geometry else None
        if slices is None or spec is None or slices > spec.compute_slices:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(
            id=profile, sliceCount=slices, instanceCount=spec.compute_slices // slices
        )

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi: FakeGpuInstance, profile_id: int
    ) -> FakeComputeInstance:
        self._check()
        self.calls.append("nvmlGpuInstanceCreateComputeInstance")
        if gi.has_compute:
            raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi.has_compute = True
        return FakeComputeInstance(gi)

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gi: FakeGpuInstance, ci_id: int
    ) -> FakeComputeInstance:
        self._check()
        if not gi.has_compute or ci_id != gi.ci_id:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeComputeInstance(gi)

    def nvmlComputeInstanceDestroy(self, ci: FakeComputeInstance) -> None:
        self._check()
        self.calls.append("nvmlComputeInstanceDestroy")
        if ci.gi.processes:
            raise _error(pynvml.NVML_ERROR_IN_USE)
        ci.gi.has_compute = False

    def nvmlGpuInstanceDestroy(self, gi: FakeGpuInstance) -> None:
        self._check()
        self.calls.append("nvmlGpuInstanceDestroy")
        if gi.has_compute:
            raise _error(pynvml.NVML_ERROR_IN_USE)
        gi.gpu.instances.remove(gi)
