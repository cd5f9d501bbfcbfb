"""MIG geometry of the A100 40GB, A100 80GB, H100 80GB and H200 141GB, as data, and an exact
layout planner over it.

Every board here has 8 memory slices (the placement axis) and 7 compute slices. A GPU
instance placed at `start` with `size` memory slices occupies `[start, start + size)`; two
instances conflict exactly when those ranges overlap, the compute slices of all instances
add up to at most 7, and at most one `+me` (media extensions) instance exists per GPU.

Sources:
- [S1] NVIDIA MIG User Guide, "Supported MIG Profiles"
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
  (A100-40GB table; the A100-80GB profile names; "+me": at most 1 per GPU).
- [S2] NVIDIA MIG User Guide, "Supported GPUs": max 7 instances on all four boards.
- [S3] NVIDIA/mig-parted deployments/systemd/config-default.yaml @bd7160f4: the "all-<profile>"
  layouts give the maximum count of every profile (A100-40GB 1g.10gb = 4; H200 names and counts).
- [S5]/[S5b] `nvidia-smi mig -lgipp` on a DGX A100 (A100-SXM4-40GB): placements, incl. IDs 20, 15.
- [S6] `nvidia-smi mig -lgip/-lgipp` on an "NVIDIA H100 80GB HBM3": placements and counts.
- [S4] NVIDIA/k8s-test-infra pkg/gpu/mocknvml/configs/mock-nvml-config-a100.yaml: profile
  IDs are device- and driver-specific.
- [S8] NVML `nvmlGpuInstancePlacement_t`: start = first memory slice, size = memory slices
  https://docs.nvidia.com/deploy/nvml-api/structnvmlGpuInstancePlacement__t.html
The A100-80GB rows reuse the 40GB placements ([S1] note); the H200 placements are *expected*
by analogy with the H100 (same GH100 die, [S2]) and not confirmed on hardware.

Pure: no I/O. Profile IDs are deliberately absent: [S4] warns they are device- and
driver-specific, so code that talks to NVML reads them from NVML by the enum named here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
MAX_INSTANCES = 7  # [S2]

_ONE_SLICE_STARTS = (0, 1, 2, 3, 4, 5, 6)  # a 1g never starts at 7 [S5, S6]
_TWO_SLICE_1G_STARTS = (0, 2, 4, 6)  # 1g.<2/8 memory> [S5b, S6]
_TWO_SLICE_2G_STARTS = (0, 2, 4)  # [S5, S6]
_HALF_STARTS = (0, 4)  # 3g [S5, S6]
_FIRST_HALF = (0,)  # 4g has only {0}:4 [S5, S6]
_WHOLE = (0,)  # 7g {0}:8


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...]
    # The NVML enum to pass to nvmlDeviceGetGpuInstanceProfileInfo (its returned `id` is
    # what placement and creation calls take) [S7].
    nvml_enum: str

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class GpuGeometry:
    key: str
    display_name: str
    profiles: tuple[MigProfile, ...]
    memory_slices: int = MEMORY_SLICES
    compute_slices: int = COMPUTE_SLICES
    max_instances: int = MAX_INSTANCES
    confirmed: bool = True  # False: placements inferred, not read from a source for this board

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.profiles]


def _profiles(
    one: str, one_double: str, two: str, three: str, four: str, seven: str
) -> tuple[MigProfile, ...]:
    """The seven GPU-instance profiles every board here has, from the smallest; the names differ
    by memory size only ([S1] note on the 80 GB names)."""
    return (
        MigProfile(one, 1, 1, 7, _ONE_SLICE_STARTS, "NVML_GPU_INSTANCE_PROFILE_1_SLICE"),
        MigProfile(
            one + "+me", 1, 1, 1, _ONE_SLICE_STARTS, "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1"
        ),
        MigProfile(
            one_double, 1, 2, 4, _TWO_SLICE_1G_STARTS, "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2"
        ),
        MigProfile(two, 2, 2, 3, _TWO_SLICE_2G_STARTS, "NVML_GPU_INSTANCE_PROFILE_2_SLICE"),
        MigProfile(three, 3, 4, 2, _HALF_STARTS, "NVML_GPU_INSTANCE_PROFILE_3_SLICE"),
        MigProfile(four, 4, 4, 1, _FIRST_HALF, "NVML_GPU_INSTANCE_PROFILE_4_SLICE"),
        MigProfile(seven, 7, 8, 1, _WHOLE, "NVML_GPU_INSTANCE_PROFILE_7_SLICE"),
    )


A100_40GB = GpuGeometry(  # [S1] table, [S3] counts, [S5]/[S5b] placements
    "a100-40gb",
    "NVIDIA A100-SXM4-40GB",
    _profiles("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
)
A100_80GB = GpuGeometry(  # [S1] names, [S3] counts; placements as on the 40 GB board
    "a100-80gb",
    "NVIDIA A100-SXM4-80GB",
    _profiles("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
)
H100_80GB = GpuGeometry(  # [S6] measured -lgip/-lgipp, counts agree with [S3]
    "h100-80gb",
    "NVIDIA H100 80GB HBM3",
    _profiles("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
)
H200_141GB = GpuGeometry(  # [S3] names and counts; placements expected (see module docstring)
    "h200-141gb",
    "NVIDIA H200",
    _profiles("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    confirmed=False,
)

GEOMETRIES: tuple[GpuGeometry, ...] = (A100_40GB, A100_80GB, H100_80GB, H200_141GB)


def geometry_for(gpu_name: str) -> GpuGeometry | None:
    """The geometry of a GPU by its NVML/Nomad model name, or by key (`a100-80gb`).

    A MIG device's name ("NVIDIA A100-SXM4-40GB MIG 3g.20gb") maps to its parent's board.
    Boards with other memory sizes (H100 NVL 94 GB, GH200) have other profiles: None.
    """
    name = gpu_name.split(" MIG ", 1)[0].strip().upper()
    for geometry in GEOMETRIES:
        if name == geometry.key.upper():
            return geometry
    if "GH200" in name:
        return None
    if "H200" in name:
        return H200_141GB
    if "H100" in name or "H800" in name:
        if "NVL" in name or "94GB" in name or "96GB" in name:
            return None
        return H100_80GB
    if "A100" in name or "A800" in name:
        return A100_80GB if "80GB" in name else A100_40GB
    return None


# ---------------------------------------------------------------- planning


class PlacedInstance(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: str
    start: int
    size: int
    compute_slices: int

    @property
    def memory_range(self) -> range:
        return range(self.start, self.start + self.size)


class Layout(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    geometry: str
    instances: list[PlacedInstance]

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for inst in sorted(self.instances, key=lambda i: (-i.compute_slices, -i.size, i.profile)):
            out[inst.profile] = out.get(inst.profile, 0) + 1
        return out

    def describe(self) -> str:
        """`3g.40gb x2, 1g.10gb x1`: biggest first, as an operator would say it."""
        return ", ".join(f"{name} x{count}" for name, count in self.counts.items())


class LayoutError(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: str


def _slices_text(mask: int) -> str:
    """Memory slices of a bit mask as ranges: `0-3, 6`."""
    parts: list[str] = []
    slot = 0
    while slot < MEMORY_SLICES:
        if mask >> slot & 1:
            end = slot
            while end + 1 < MEMORY_SLICES and mask >> (end + 1) & 1:
                end += 1
            parts.append(str(slot) if end == slot else f"{slot}-{end}")
            slot = end + 1
        else:
            slot += 1
    return ", ".join(parts)


def _range_mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _search(
    items: list[MigProfile], used: int, out: list[tuple[MigProfile, int]]
) -> list[tuple[MigProfile, int]] | None:
    """Depth-first over placements. `items` is sorted so equal profiles are adjacent; each copy
    of a profile starts after the previous copy, which removes permutations of equal ones."""
    if not items:
        return list(out)
    profile, rest = items[0], items[1:]
    floor = -1
    if out and out[-1][0] is profile:
        floor = out[-1][1]
    for start in profile.starts:
        if start <= floor:
            continue
        mask = _range_mask(start, profile.memory_slices)
        if used & mask:
            continue
        out.append((profile, start))
        found = _search(rest, used | mask, out)
        out.pop()
        if found is not None:
            return found
    return None


def _order(geometry: GpuGeometry, want: dict[str, int]) -> list[tuple[MigProfile, int]]:
    """Requested profiles, the most constrained (largest, fewest placements) first."""
    pairs = [(geometry.profile(name), count) for name, count in want.items() if count > 0]
    resolved = [(p, c) for p, c in pairs if p is not None]
    return sorted(resolved, key=lambda pc: (-pc[0].memory_slices, len(pc[0].starts), pc[0].name))


def find_placements(
    geometry: GpuGeometry, want: dict[str, int]
) -> list[tuple[MigProfile, int]] | None:
    """Exact search: (profile, start) per instance, or None if the memory slices cannot hold them.
    Only the memory-slice overlap rule is checked here; counts are checked by plan_layout."""
    items: list[MigProfile] = []
    for profile, count in _order(geometry, want):
        items.extend([profile] * count)
    return _search(items, 0, [])


def _at_most(n: int) -> str:
    return f"{n} fits" if n == 1 else f"{n} fit"


def _want_text(pairs: list[tuple[MigProfile, int]]) -> str:
    return ", ".join(f"{p.name}={c}" for p, c in pairs)


def _fits(geometry: GpuGeometry, want: dict[str, int]) -> list[tuple[MigProfile, int]] | None:
    """Placements for `want` under every rule (counts, +me, instances, compute, memory)."""
    ordered = _order(geometry, want)
    if any(c > p.max_count for p, c in ordered):
        return None
    if sum(c for p, c in ordered if p.media_extensions) > 1:
        return None
    if sum(c for _, c in ordered) > geometry.max_instances:
        return None
    if sum(p.compute_slices * c for p, c in ordered) > geometry.compute_slices:
        return None
    return find_placements(geometry, want)


def plan_layout(gpu: str, want: dict[str, int]) -> Layout | LayoutError:
    """A set of GPU instances on `gpu` (a model name or geometry key) holding `want`
    (profile name -> count), with each instance's placement start, or why none exists."""
    geometry = geometry_for(gpu)
    if geometry is None:
        known = ", ".join(g.display_name for g in GEOMETRIES)
        return LayoutError(reason=f"no MIG geometry is known for GPU {gpu!r}: known are {known}")
    label = geometry.display_name if gpu.upper() == geometry.key.upper() else gpu
    for name, count in want.items():
        profile = geometry.profile(name)
        if profile is None:
            valid = ", ".join(geometry.profile_names)
            return LayoutError(
                reason=f"profile {name!r} does not exist on {label}: valid are {valid}"
            )
        if count < 0:
            return LayoutError(reason=f"{name}={count}: a count cannot be negative")
        if count > profile.max_count:
            fits = "fits" if profile.max_count == 1 else "fit"
            return LayoutError(
                reason=f"{name}={count}: at most {profile.max_count} {fits} on {label}"
            )
    found = _fits(geometry, want)
    if found is None:
        return LayoutError(reason=_explain_no_fit(geometry, _order(geometry, want), label))
    placed = [
        PlacedInstance(
            profile=p.name, start=s, size=p.memory_slices, compute_slices=p.compute_slices
        )
        for p, s in found
    ]
    placed.sort(key=lambda i: (i.start, i.profile))
    return Layout(gpu=label, geometry=geometry.key, instances=placed)


def _explain_no_fit(
    geometry: GpuGeometry, ordered: list[tuple[MigProfile, int]], label: str
) -> str:
    """Name the first requested count (most constrained first) that cannot join those before it,
    and what the earlier ones already hold."""
    for index, (profile, count) in enumerate(ordered):
        prefix = ordered[:index]
        before = {p.name: c for p, c in prefix}
        if _fits(geometry, {**before, profile.name: count}) is not None:
            continue
        best = next(
            (k for k in range(count - 1, 0, -1) if _fits(geometry, {**before, profile.name: k})),
            0,
        )
        if not prefix:
            return f"{profile.name}={count}: at most {_at_most(best)} on {label}"
        taken = 0
        for p, s in _fits(geometry, before) or []:
            taken |= _range_mask(s, p.memory_slices)
        held = [f"memory slices {_slices_text(taken)} taken"]
        compute = sum(p.compute_slices * c for p, c in prefix)
        if compute + profile.compute_slices * count > geometry.compute_slices:
            held.append(f"{compute} of {geometry.compute_slices} compute slices used")
        instances = sum(c for _, c in prefix)
        if instances + count > geometry.max_instances:
            held.append(f"{instances} of {geometry.max_instances} instances used")
        if profile.media_extensions and any(p.media_extensions for p, _ in prefix):
            held.append("the one +me instance is used")
        return (
            f"with {_want_text(prefix)}, {profile.name}={count} cannot fit "
            f"({'; '.join(held)}; at most {_at_most(best)} on {label})"
        )
    return f"{_want_text(ordered)} cannot be placed on {label}"


def parse_want(text: str) -> dict[str, int]:
    """`3g.40gb=2,1g.10gb=1` -> {"3g.40gb": 2, "1g.10gb": 1}; ValueError with a sentence if not."""
    example = "PROFILE=COUNT[,PROFILE=COUNT...], e.g. 3g.40gb=2,1g.10gb=1"
    want: dict[str, int] = {}
    for part in text.split(","):
        name, sep, count = part.strip().partition("=")
        name, count = name.strip(), count.strip()
        if not name:
            raise ValueError(f"--want {part.strip()!r} names no profile; write {example}")
        if not sep:
            raise ValueError(
                f"--want {name} has no count: write {name}=COUNT, e.g. {name}=1 ({example})"
            )
        if not count.isdigit():
            raise ValueError(
                f"--want {name}={count}: the count must be a whole number, e.g. {name}=1"
            )
        if name in want:
            raise ValueError(f"--want names {name} twice; give each profile once")
        want[name] = int(count)
    return want
