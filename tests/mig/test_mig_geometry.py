"""MIG geometry and plan_layout against the rules of /work/shared/reference/mig-profiles.md."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.mig_geometry import (
    A100_40GB,
    A100_80GB,
    GEOMETRIES,
    H100_80GB,
    H200_141GB,
    GpuGeometry,
    Layout,
    LayoutError,
    geometry_for,
    parse_want,
    plan_layout,
)

ALL_PROFILES = [(g, p) for g in GEOMETRIES for p in g.profiles]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", A100_40GB),
        ("NVIDIA A100-PCIE-40GB", A100_40GB),
        ("NVIDIA A100-SXM4-80GB", A100_80GB),
        ("NVIDIA A100 80GB PCIe", A100_80GB),
        ("NVIDIA H100 80GB HBM3", H100_80GB),
        ("NVIDIA H100 PCIe", H100_80GB),
        ("NVIDIA H200", H200_141GB),
        ("NVIDIA H200 NVL", H200_141GB),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", A100_40GB),
        ("a100-80gb", A100_80GB),
        ("NVIDIA H100 NVL", None),  # 94 GB board: other profiles
        ("NVIDIA GH200 480GB", None),
        ("Tesla V100-SXM2-16GB", None),
    ],
)
def test_gpu_names_map_to_their_board(name: str, expected: GpuGeometry | None) -> None:
    assert geometry_for(name) is expected


def test_tables_match_the_reference() -> None:
    # Spot checks straight from the tables of mig-profiles.md.
    a40 = {p.name: p for p in A100_40GB.profiles}
    assert (a40["1g.5gb"].max_count, a40["1g.5gb"].starts) == (7, (0, 1, 2, 3, 4, 5, 6))
    assert (a40["1g.10gb"].max_count, a40["1g.10gb"].memory_slices) == (4, 2)
    assert a40["3g.20gb"].starts == (0, 4)
    assert a40["4g.20gb"].starts == (0,)
    assert (a40["7g.40gb"].compute_slices, a40["7g.40gb"].memory_slices) == (7, 8)
    h200 = {p.name for p in H200_141GB.profiles}
    assert h200 == {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}
    assert {p.name for p in H100_80GB.profiles} == {p.name for p in A100_80GB.profiles}
    for geometry in GEOMETRIES:
        for profile in geometry.profiles:
            assert all(s + profile.memory_slices <= 8 for s in profile.starts), profile


@pytest.mark.parametrize(
    ("geometry", "profile"), ALL_PROFILES, ids=lambda x: x.name if hasattr(x, "name") else x.key
)
def test_every_profile_at_its_maximum_count(geometry: GpuGeometry, profile) -> None:
    layout = plan_layout(geometry.display_name, {profile.name: profile.max_count})
    assert isinstance(layout, Layout), layout
    assert layout.counts == {profile.name: profile.max_count}
    assert all(i.start in profile.starts for i in layout.instances)
    too_many = plan_layout(geometry.display_name, {profile.name: profile.max_count + 1})
    assert isinstance(too_many, LayoutError)
    fit = "fits" if profile.max_count == 1 else "fit"
    assert too_many.reason == (
        f"{profile.name}={profile.max_count + 1}: at most {profile.max_count} {fit} "
        f"on {geometry.display_name}"
    )


@pytest.mark.parametrize(
    ("gpu", "want", "starts"),
    [
        ("NVIDIA A100-SXM4-80GB", {"4g.40gb": 1, "3g.40gb": 1}, {"4g.40gb": [0], "3g.40gb": [4]}),
        ("NVIDIA A100-SXM4-40GB", {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, None),
        ("NVIDIA H100 80GB HBM3", {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, None),
        ("NVIDIA H100 80GB HBM3", {"2g.20gb": 3, "1g.10gb": 1}, {"1g.10gb": [6]}),
        ("NVIDIA H200", {"3g.71gb": 1, "2g.35gb": 2}, {"3g.71gb": [4]}),
        ("NVIDIA H200", {"4g.71gb": 1, "1g.35gb": 1, "1g.18gb+me": 1, "1g.18gb": 1}, None),
        ("NVIDIA A100-SXM4-80GB", {"1g.20gb": 3, "1g.10gb": 1}, None),
        ("NVIDIA A100-SXM4-80GB", {"1g.10gb+me": 1, "1g.10gb": 6}, None),
    ],
)
def test_mixed_requests_fit(
    gpu: str, want: dict[str, int], starts: dict[str, list[int]] | None
) -> None:
    layout = plan_layout(gpu, want)
    assert isinstance(layout, Layout), layout
    assert layout.counts == {k: v for k, v in want.items()}
    if starts:
        for name, expected in starts.items():
            assert sorted(i.start for i in layout.instances if i.profile == name) == expected


@pytest.mark.parametrize(
    ("gpu", "want", "reason"),
    [
        (
            "NVIDIA A100-SXM4-80GB",
            {"3g.40gb": 3},
            "3g.40gb=3: at most 2 fit on NVIDIA A100-SXM4-80GB",
        ),
        (
            "NVIDIA A100-SXM4-80GB",
            {"4g.40gb": 1, "3g.40gb": 2},
            "with 4g.40gb=1, 3g.40gb=2 cannot fit (memory slices 0-3 taken; 4 of 7 compute "
            "slices used; at most 1 fits on NVIDIA A100-SXM4-80GB)",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            {"7g.80gb": 1, "1g.10gb": 1},
            "with 7g.80gb=1, 1g.10gb=1 cannot fit (memory slices 0-7 taken; 7 of 7 compute "
            "slices used; at most 0 fit on NVIDIA H100 80GB HBM3)",
        ),
        (
            "NVIDIA A100-SXM4-40GB",
            {"3g.20gb": 2, "1g.5gb": 1},
            "with 3g.20gb=2, 1g.5gb=1 cannot fit (memory slices 0-7 taken; "
            "at most 0 fit on NVIDIA A100-SXM4-40GB)",
        ),
        (
            "NVIDIA H200",
            {"1g.18gb": 7, "1g.18gb+me": 1},
            "with 1g.18gb=7, 1g.18gb+me=1 cannot fit (memory slices 0-6 taken; 7 of 7 compute "
            "slices used; 7 of 7 instances used; at most 0 fit on NVIDIA H200)",
        ),
    ],
)
def test_impossible_requests_say_which_count_fails(
    gpu: str, want: dict[str, int], reason: str
) -> None:
    result = plan_layout(gpu, want)
    assert isinstance(result, LayoutError)
    assert result.reason == reason


def test_unknown_gpu_and_profile_are_explained() -> None:
    result = plan_layout("Tesla T4", {"1g.5gb": 1})
    assert (
        isinstance(result, LayoutError)
        and "no MIG geometry is known for GPU 'Tesla T4'" in result.reason
    )
    result = plan_layout("NVIDIA H100 80GB HBM3", {"3g.20gb": 1})
    assert isinstance(result, LayoutError)
    assert result.reason.startswith("profile '3g.20gb' does not exist on NVIDIA H100 80GB HBM3")


def test_order_matters_4g_only_fits_at_zero() -> None:
    # mig-profiles.md property 4: 4g first then 3g succeeds; the planner reorders for you.
    layout = plan_layout("NVIDIA H100 80GB HBM3", {"3g.40gb": 1, "4g.40gb": 1})
    assert isinstance(layout, Layout)
    assert {(i.profile, i.start) for i in layout.instances} == {("4g.40gb", 0), ("3g.40gb", 4)}


@pytest.mark.parametrize(
    ("text", "want"),
    [("3g.40gb=2", {"3g.40gb": 2}), ("3g.40gb=1, 1g.10gb=3", {"3g.40gb": 1, "1g.10gb": 3})],
)
def test_parse_want(text: str, want: dict[str, int]) -> None:
    assert parse_want(text) == want


@pytest.mark.parametrize("text", ["3g.40gb", "=2", "3g.40gb=two", "3g.40gb=-1", "a=1,a=2", ""])
def test_parse_want_rejects_bad_syntax(text: str) -> None:
    with pytest.raises(ValueError, match="--want"):
        parse_want(text)


# ---------------------------------------------------------------- properties


def _brute_force_fits(geometry: GpuGeometry, want: dict[str, int]) -> bool:
    """Every assignment of a placement to every instance: is one overlap-free under the rules?"""
    items = [geometry.profile(n) for n, c in want.items() for _ in range(c)]
    if any(p is None for p in items):
        return False
    if any(c > geometry.profile(n).max_count for n, c in want.items()):  # type: ignore[union-attr]
        return False
    if sum(p.compute_slices for p in items) > 7 or len(items) > 7:  # type: ignore[union-attr]
        return False
    if sum(p.media_extensions for p in items) > 1:  # type: ignore[union-attr]
        return False
    for starts in itertools.product(*(p.starts for p in items)):  # type: ignore[union-attr]
        used = [0] * 8
        ok = True
        for p, s in zip(items, starts, strict=True):
            for slot in range(s, s + p.memory_slices):  # type: ignore[union-attr]
                used[slot] += 1
                ok = ok and used[slot] == 1
        if ok:
            return True
    return False


def _wants(geometry: GpuGeometry) -> st.SearchStrategy[dict[str, int]]:
    return st.dictionaries(
        st.sampled_from(geometry.profile_names), st.integers(min_value=1, max_value=4), max_size=4
    )


@st.composite
def _requests(draw: st.DrawFn) -> tuple[GpuGeometry, dict[str, int]]:
    geometry = draw(st.sampled_from(GEOMETRIES))
    return geometry, draw(_wants(geometry))


@settings(max_examples=300, deadline=None)
@given(_requests())
def test_placed_instances_never_overlap_and_fit_the_rules(
    request: tuple[GpuGeometry, dict[str, int]],
) -> None:
    geometry, want = request
    result = plan_layout(geometry.key, want)
    if isinstance(result, LayoutError):
        return
    used: set[int] = set()
    for inst in result.instances:
        spec = geometry.profile(inst.profile)
        assert spec is not None and inst.start in spec.starts and inst.size == spec.memory_slices
        slots = set(inst.memory_range)
        assert not used & slots, result
        used |= slots
        assert 7 not in slots or spec.memory_slices > 1  # a 1-slice 1g never starts at 7
    assert sum(i.compute_slices for i in result.instances) <= 7
    assert len(result.instances) <= 7
    assert sum(i.profile.endswith("+me") for i in result.instances) <= 1
    for name, count in result.counts.items():
        assert count <= geometry.profile(name).max_count  # type: ignore[union-attr]
    assert result.counts == {k: v for k, v in want.items() if v}


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_never_says_no_fit_when_brute_force_finds_one(
    request: tuple[GpuGeometry, dict[str, int]],
) -> None:
    geometry, want = request
    result = plan_layout(geometry.key, want)
    assert isinstance(result, Layout) == _brute_force_fits(geometry, want), (want, result)


def test_brute_force_agrees_on_every_small_request() -> None:
    # Exhaustive over up to three distinct profiles with counts 1..2 on every board.
    for geometry in GEOMETRIES:
        names = geometry.profile_names
        for size in (1, 2, 3):
            for combo in itertools.combinations(names, size):
                for counts in itertools.product((1, 2), repeat=size):
                    want = dict(zip(combo, counts, strict=True))
                    got = isinstance(plan_layout(geometry.key, want), Layout)
                    assert got == _brute_force_fits(geometry, want), (geometry.key, want)
