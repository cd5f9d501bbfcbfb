"""What one node offers at the start of a pass: its free devices and its shape."""

from __future__ import annotations

from scheduler.core.facts import Shape
from scheduler.core.models import GPU, MigSlice, Node


def devices_of(
    node: Node, used: set[str], slice_kinds: dict[str, int]
) -> tuple[list[GPU], dict[str, list[MigSlice]], int, int, Shape]:
    """A node's free whole GPUs and free slices (by MIG profile), its devices taken and in
    all, and its shape; counts its healthy slices into `slice_kinds` when it is eligible.
    Each field is read once (a pydantic attribute is a dict lookup)."""
    free_gpus: list[GPU] = []
    free_slices: dict[str, list[MigSlice]] = {}
    total = used_units = 0
    whole_shape: list[tuple[str, float, bool]] = []
    mig_shape: list[tuple[str, float, bool, bool]] = []
    eligible = node.eligible
    for gpu in node.gpus:
        mig = gpu.mig
        gpu_ok = gpu.healthy
        if mig is None:
            total += 1
            whole_shape.append((gpu.model, gpu.memory_gb, gpu_ok))
            if gpu.id in used:
                used_units += 1
            elif gpu_ok:
                free_gpus.append(gpu)
            continue
        any_ok = False
        for s in mig:
            total += 1
            slice_ok = s.healthy
            any_ok = any_ok or slice_ok
            taken = s.id in used
            if taken:
                used_units += 1
            if not (slice_ok and gpu_ok):
                continue
            prof = s.profile
            if eligible:
                slice_kinds[prof] = slice_kinds.get(prof, 0) + 1
            if taken:
                continue
            free = free_slices.get(prof)
            if free is None:
                free_slices[prof] = [s]
            else:
                free.append(s)
        mig_shape.append((gpu.model, gpu.memory_gb, gpu_ok, any_ok))
    whole_shape.sort()
    mig_shape.sort()
    shape = (eligible, tuple(whole_shape), tuple(mig_shape))
    return free_gpus, free_slices, used_units, total, shape
