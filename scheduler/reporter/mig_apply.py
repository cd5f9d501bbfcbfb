"""Re-partitioning one idle MIG GPU into a planned layout through NVML.

Only a GPU in MIG mode with no processes on it or on any of its MIG devices is touched. Its
existing compute and GPU instances are destroyed, then one GPU instance per planned instance is
created at the planned placement (nvmlDeviceCreateGpuInstanceWithPlacement), each with one
compute instance spanning it (nvmlGpuInstanceCreateComputeInstance). Profile IDs are read from
NVML (nvmlDeviceGetGpuInstanceProfileInfo), never hard-coded: they are device- and driver-specific.
Without `apply=True` nothing is changed and the steps are returned as sentences.
Needs root on a real node; Nomad's device plugin re-fingerprints the new slices by itself.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.mig_geometry import (
    GpuGeometry,
    Layout,
    LayoutError,
    PlacedInstance,
    geometry_for,
    plan_layout,
)
from scheduler.reporter.probe import NVML_MISSING, mig_profile_from_name

# Compute-instance profile enum for a GPU instance of N compute slices (one CI spans the GI).
CI_PROFILE_BY_SLICES = {
    1: "NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE",
    2: "NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE",
    3: "NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE",
    4: "NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE",
    7: "NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE",
}


class MigApplyError(RuntimeError):
    """Why the layout was not applied: one sentence for the operator."""


@dataclass
class ApplyResult:
    gpu: str
    layout: Layout
    steps: list[str] = field(default_factory=list)
    applied: bool = False


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _existing_devices(nvml: Any, handle: Any) -> list[Any]:
    found = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            found.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError_NotFound:
            continue
    return found


def _placement(nvml: Any, start: int, size: int) -> Any:
    struct = nvml.c_nvmlGpuInstancePlacement_t()
    struct.start, struct.size = start, size
    return ctypes.byref(struct)  # the C API takes a pointer to the placement


def apply_mig_layout(
    index: int, want: dict[str, int], *, apply: bool = False, nvml: Any = None
) -> ApplyResult:
    if nvml is None:
        import pynvml

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        why = (
            "libnvidia-ml.so.1 not found"
            if isinstance(err, nvml.NVMLError_LibraryNotFound)
            else str(err)
        )
        raise MigApplyError(NVML_MISSING.format(why=why)) from err
    try:
        return _apply(nvml, index, want, apply)
    except nvml.NVMLError_NoPermission as err:
        raise MigApplyError(
            "changing MIG instances needs root (NVML: insufficient permissions)"
        ) from err
    except nvml.NVMLError as err:
        raise MigApplyError(f"NVML refused the change on GPU {index}: {err}") from err
    finally:
        nvml.nvmlShutdown()


def _apply(nvml: Any, index: int, want: dict[str, int], apply: bool) -> ApplyResult:
    count = nvml.nvmlDeviceGetCount()
    if not 0 <= index < count:
        raise MigApplyError(f"there is no GPU {index} on this node (it has {count})")
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    label = f"GPU {index} ({name})"
    planned = plan_layout(name, want)
    if isinstance(planned, LayoutError):
        raise MigApplyError(planned.reason)
    geometry = geometry_for(name)
    assert geometry is not None  # plan_layout succeeded
    try:
        current_mode = nvml.nvmlDeviceGetMigMode(handle)[0]
    except nvml.NVMLError_NotSupported as err:
        raise MigApplyError(f"{label} does not support MIG") from err
    if current_mode != nvml.NVML_DEVICE_MIG_ENABLE:
        raise MigApplyError(
            f"MIG mode is off on {label}: enable it first with `nvidia-smi -i {index} -mig 1`"
        )
    devices = _existing_devices(nvml, handle)
    _require_idle(nvml, handle, devices, label)
    result = ApplyResult(gpu=label, layout=planned, applied=apply)
    _destroy(nvml, handle, devices, result)
    for instance in planned.instances:
        _create(nvml, handle, geometry, instance, label, result)
    return result


def _require_idle(nvml: Any, handle: Any, devices: list[Any], label: str) -> None:
    busy = [
        _text(nvml.nvmlDeviceGetUUID(d))
        for d in devices
        if nvml.nvmlDeviceGetComputeRunningProcesses(d)
    ]
    if busy or nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        raise MigApplyError(
            f"{label} is not idle: processes run on {', '.join(busy) or 'it'}; "
            "drain its replicas before re-partitioning"
        )


def _destroy(nvml: Any, handle: Any, devices: list[Any], result: ApplyResult) -> None:
    """Every MIG device the GPU has now goes (only said, without --apply)."""
    apply = result.applied
    verb = "" if apply else "would "
    for device in devices:
        uuid = _text(nvml.nvmlDeviceGetUUID(device))
        profile = mig_profile_from_name(_text(nvml.nvmlDeviceGetName(device)))
        result.steps.append(f"{verb}destroy MIG device {uuid} ({profile})")
        if apply:
            gi = nvml.nvmlDeviceGetGpuInstanceById(handle, nvml.nvmlDeviceGetGpuInstanceId(device))
            ci = nvml.nvmlGpuInstanceGetComputeInstanceById(
                gi, nvml.nvmlDeviceGetComputeInstanceId(device)
            )
            nvml.nvmlComputeInstanceDestroy(ci)
            nvml.nvmlGpuInstanceDestroy(gi)


def _create(
    nvml: Any,
    handle: Any,
    geometry: GpuGeometry,
    instance: PlacedInstance,
    label: str,
    result: ApplyResult,
) -> None:
    """One planned GPU instance with one compute instance (only said, without --apply)."""
    apply = result.applied
    verb = "" if apply else "would "
    spec = geometry.profile(instance.profile)
    assert spec is not None
    result.steps.append(
        f"{verb}create GPU instance {instance.profile} at memory slices "
        f"{instance.start}-{instance.start + instance.size - 1} with one compute instance"
    )
    if not apply:
        return
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, getattr(nvml, spec.nvml_enum))
    try:
        gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, info.id, _placement(nvml, instance.start, instance.size)
        )
    except nvml.NVMLError as err:
        raise MigApplyError(
            f"creating {instance.profile} at slice {instance.start} on {label} failed: {err} "
            "(a GPU instance without a compute instance may remain: `nvidia-smi mig -lgi`)"
        ) from err
    ci_enum = getattr(nvml, CI_PROFILE_BY_SLICES[spec.compute_slices])
    ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, ci_enum, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
