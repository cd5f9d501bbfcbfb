"""On a real GPU node only (`pytest -m gpu`): the geometry tables against what NVML says, and the
probe against the real library. Read-only: nothing here changes MIG mode or instances."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from scheduler.core.mig_geometry import geometry_for
from scheduler.reporter.probe import NvmlProbe

pytestmark = pytest.mark.gpu


@pytest.fixture
def nvml() -> Iterator[Any]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        pytest.skip(f"no NVML here: {err}")
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def test_probe_reads_the_real_gpus(nvml: Any) -> None:
    report = NvmlProbe("gpu-test", nvml=nvml).read()
    assert len(report.gpus) == nvml.nvmlDeviceGetCount() > 0
    for gpu in report.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.memory_total_bytes > 0
        assert gpu.pci_bus_id


def test_geometry_tables_match_nvml(nvml: Any) -> None:
    checked = 0
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        geometry = geometry_for(name if isinstance(name, str) else name.decode())
        if geometry is None:
            continue
        for profile in geometry.profiles:
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(
                    handle, getattr(nvml, profile.nvml_enum)
                )
            except nvml.NVMLError as err:
                pytest.skip(f"{name}: no GPU instance profile info ({err}); MIG off or unsupported")
            label = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            assert label.endswith(profile.name), (label, profile.name)
            assert info.sliceCount == profile.compute_slices, profile.name
            assert info.instanceCount == profile.max_count, profile.name
            placements = (nvml.c_nvmlGpuInstancePlacement_t * 16)()
            count = ctypes.c_uint(16)
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                handle, info.id, placements, ctypes.byref(count)
            )
            got = [(placements[i].start, placements[i].size) for i in range(count.value)]
            want = [(s, profile.memory_slices) for s in profile.starts]
            assert got == want, (name, profile.name, got)
            checked += 1
    if not checked:
        pytest.skip("no GPU here has a known MIG geometry")
