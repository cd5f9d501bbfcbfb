"""The benchmarks run end to end at a tiny size, and their generators and yardsticks are right.

The timing figures themselves are not asserted (the machine is shared); their presence and
sanity are. The CP-SAT optimum is checked on hand-made instances whose optimum is known.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import (  # noqa: E402
    access_floor,
    fleetgen,
    pass_instructions,
    prefetch_cost,
    quality,
    snapshot_layout,
)
from scheduler.core.mig_geometry import LayoutError, plan_layout  # noqa: E402


def _run_json(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# ---------------------------------------------------------------- generators


def test_fleet_is_deterministic_and_has_the_asked_mig_share() -> None:
    a = fleetgen.fleet(50, seed=3)
    b = fleetgen.fleet(50, seed=3)
    assert [n.model_dump() for n in a] == [n.model_dump() for n in b]
    assert fleetgen.fleet(50, seed=4)[0].gpus[0].id != a[0].gpus[0].id
    gpus = [g for n in a for g in n.gpus]
    assert len(gpus) == 400
    assert sum(1 for g in gpus if g.mig is not None) == 40


def test_mig_layouts_are_valid_on_their_boards() -> None:
    boards = {80: fleetgen.H100, 40: fleetgen.A100_40}
    for memory, layouts in fleetgen.MIG_LAYOUTS.items():
        for layout in layouts:
            result = plan_layout(boards[memory], dict(Counter(layout)))
            assert not isinstance(result, LayoutError), (layout, result)


def test_nvlink_peers_stay_inside_groups_of_four_or_eight() -> None:
    for node in fleetgen.fleet(30, seed=1):
        ids = {g.id for g in node.gpus}
        for gpu in node.gpus:
            if gpu.mig is None:
                assert len(gpu.nvlink_peers) in (3, 7)
                assert set(gpu.nvlink_peers) <= ids - {gpu.id}
            else:
                assert gpu.nvlink_peers == []


def test_steady_snapshot_never_double_books_and_respects_node_capacity() -> None:
    snap = fleetgen.steady_snapshot(60, seed=2)
    nodes = {n.id: n for n in snap.nodes}
    devices = {
        n.id: {g.id for g in n.gpus if g.mig is None} | {s.id for g in n.gpus for s in g.mig or []}
        for n in snap.nodes
    }
    models = {m.name: m for m in snap.models}
    seen: set[str] = set()
    cpu: Counter[str] = Counter()
    for r in snap.replicas:
        profile = models[r.model].profile(r.profile)
        assert profile is not None
        assert len({s.node for s in r.shards}) == profile.shards
        for shard in r.shards:
            assert set(shard.gpus) <= devices[shard.node]
            assert not seen & set(shard.gpus)
            seen |= set(shard.gpus)
            cpu[shard.node] += profile.cpu_cores
    assert all(cpu[n] <= nodes[n].cpu_cores for n in cpu)
    # A steady state: most models have replicas, the fleet is well used, not empty.
    assert len({r.model for r in snap.replicas}) > 0.7 * len(snap.models)
    assert len(seen) > 0.6 * fleetgen.describe(snap)["gpus"]


def test_steady_snapshot_with_caches_holds_what_runs_on_each_node() -> None:
    snap = fleetgen.steady_snapshot(60, seed=2, caches=True)
    assert all(m.serve is not None for m in snap.models)
    held = {n.id: {s.source for s in n.cache.snapshots} for n in snap.nodes if n.cache}
    assert len(held) == len(snap.nodes)
    for r in snap.replicas:
        assert all(f"org/{r.model}" in held[sh.node] for sh in r.shards)
    bare = fleetgen.steady_snapshot(60, seed=2)
    assert [r.shards for r in bare.replicas] == [r.shards for r in snap.replicas]


# ---------------------------------------------------------------- yardsticks


def _inst(
    nodes: list[tuple[str, int]], models: list[tuple[int, int, str | None, int]]
) -> quality.Instance:
    return quality.Instance(
        tuple(quality.QNode(f"n{i}", t, g) for i, (t, g) in enumerate(nodes)),
        tuple(quality.QModel(f"m{j}", g, s, o, c) for j, (g, s, o, c) in enumerate(models)),
    )


H100, A100 = quality.GPU_TYPES


def test_optimum_beats_first_fit_where_order_matters() -> None:
    # Two 4-GPU nodes: first-fit puts three 1-GPU replicas on n0, then only one 4-GPU replica
    # fits (7); two 4-GPU replicas alone hold 8.
    inst = _inst([(H100, 4), (H100, 4)], [(1, 1, None, 3), (4, 1, None, 2)])
    assert quality.first_fit(inst) == 7
    value, proven, _ = quality.optimum(inst, 5.0)
    assert proven and value == 8


def test_optimum_honours_gpu_type_and_distinct_shard_nodes() -> None:
    # Only one H100 node: a 2-shard H100-only replica cannot be placed at all.
    inst = _inst([(H100, 8), (A100, 8)], [(4, 2, "H100", 1), (8, 1, None, 1)])
    value, proven, _ = quality.optimum(inst, 5.0)
    assert proven and value == 8
    inst2 = _inst([(H100, 8), (H100, 8)], [(4, 2, "H100", 2)])
    value2, proven2, _ = quality.optimum(inst2, 5.0)
    assert proven2 and value2 == 16


# ---------------------------------------------------------------- the scripts


def test_pass_time_script_prints_sane_json() -> None:
    out = _run_json("bench.pass_time", "--sizes", "10,20", "--quick")
    assert [s["nodes"] for s in out["sizes"]] == [10, 20]
    for size in out["sizes"]:
        assert size["models"] == 2 * size["nodes"]
        assert size["runs"] >= 3
        assert 0 < size["min_ms"] <= size["median_ms"] <= size["p90_ms"]
        assert size["placements_per_s"] >= 0
        assert size["tracemalloc_peak_mb"] > 0
        assert size["objects_left_in_cycles"] == 0  # freed as decide() returns
        assert size["collect_after_median_ms"] >= 0
    assert out["ru_maxrss_mb"] > 0
    # Which CPython build ran it: figures from different builds are not comparable.
    assert out["interpreter"]["version"] == out["python"]
    assert Path(out["interpreter"]["executable"]).name.startswith("python")
    assert out["growth"]["steps"][0]["work_ratio"] == pytest.approx(4.0)
    assert isinstance(out["growth"]["fit_exponent_vs_nodes_x_models"], float)
    # Twice the nodes and models is four times nodes x models: half the exponent in size.
    assert out["growth"]["fit_exponent_vs_cluster_size"] == pytest.approx(
        2 * out["growth"]["fit_exponent_vs_nodes_x_models"], abs=0.002
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_pass_instructions_counts_one_pass() -> None:
    out = _run_json("bench.pass_instructions", "--sizes", "10")
    [size] = out["sizes"]
    assert size["nodes"] == 10
    # One warm pass, not a process (a start, the imports and a snapshot: ~10^9 instructions).
    assert 0 < size["instructions"] < 10**8
    assert size["per_node"] == round(size["instructions"] / 10)
    assert out["slope_vs_cluster_size"] is None  # one size
    assert out["interpreter"]["version"]


def test_instruction_counts_are_read_from_callgrinds_last_line() -> None:
    err = "==41== Callgrind, a call-graph generating cache profiler\n==41== Collected : 123\n"
    assert pass_instructions.collected(err + "==41== Collected : 4567\n") == 4567
    with pytest.raises(RuntimeError, match="no instruction count"):
        pass_instructions.collected("valgrind: command not found")


def test_access_floor_reads_the_same_work_per_node_at_each_size() -> None:
    out = _run_json("bench.access_floor", "--sizes", "20,40", "--rounds", "1")
    small, large = out["results"]
    for size in out["results"]:
        snap, counts = size["snapshot"], size["counts"]
        # Every replica indexed, every device a shard holds found, every shard on a known node.
        assert counts["replicas_indexed"] == snap["replicas"]
        assert counts["devices_found"] == counts["walk_objects_and_devices"][1] > 0
        assert counts["shards_on_known_nodes"] >= snap["replicas"]
        assert counts["shards_on_known_nodes_indexed"] == counts["shards_on_known_nodes"]
        assert set(size["ns_per_node"]) == {
            "walk",
            "node_join",
            "device_join",
            "replica_index",
            "indexed_join",
            "pass",
        }
        assert all(v > 0 for v in size["ns_per_node"].values())
    # The reads do about the same work per node at both sizes: a slope is the machine's.
    ratio = (
        large["counts"]["walk_objects_and_devices"][0]
        / small["counts"]["walk_objects_and_devices"][0]
    )
    assert 1.6 < ratio < 2.4
    assert set(out["slope_in_size"]) == set(small["ns_per_node"])


def test_access_floor_joins_count_what_they_find() -> None:
    snap = fleetgen.steady_snapshot(12, seed=1)
    shards = [sh for r in snap.replicas for sh in r.shards]
    nodes = {n.id: 1 for n in snap.nodes[1:]}  # one node unknown: its shards are not found
    on_first = sum(sh.node == snap.nodes[0].id for sh in shards)
    assert access_floor.node_join(snap, nodes) == len(shards) - on_first
    held = {d for sh in shards[1:] for d in sh.gpus}
    assert access_floor.device_join(snap, held) == sum(len(sh.gpus) for sh in shards[1:]) + sum(
        d in held for d in shards[0].gpus
    )
    assert access_floor.walk(snap)[1] == sum(len(sh.gpus) for sh in shards)
    where = {n.id: i for i, n in enumerate(snap.nodes)}
    positions = [where[sh.node] if sh.node != snap.nodes[0].id else -1 for sh in shards]
    assert access_floor.indexed_join(positions, len(snap.nodes)) == len(shards) - on_first


def test_snapshot_layout_interns_what_the_pass_looks_up() -> None:
    snap = fleetgen.steady_snapshot(10, seed=0)
    doc = snapshot_layout.intern_ids(json.loads(snap.model_dump_json(by_alias=True)))
    read = snapshot_layout.Snapshot.model_validate(doc)
    ids = {n.id: n.id for n in read.nodes}
    devices = {g.id: g.id for n in read.nodes for g in n.gpus}
    devices.update({s.id: s.id for n in read.nodes for g in n.gpus for s in g.mig or ()})
    names = {m.name: m.name for m in read.models}
    shards = [sh for r in read.replicas for sh in r.shards]
    assert shards and all(sh.node is ids[sh.node] for sh in shards)
    assert all(d is devices[d] for sh in shards for d in sh.gpus)
    assert all(r.model is names[r.model] for r in read.replicas)
    out = _run_json("bench.snapshot_layout", "--sizes", "20", "--rounds", "1")
    [size] = out["results"]
    assert set(size["median_ms"]) == {"generated", "read", "read_interned"}
    assert set(size["ratio_to_generated"]) == {"read", "read_interned"}


def test_pass_compare_against_itself_prints_sane_ratios() -> None:
    out = _run_json(
        "bench.pass_compare",
        "--against",
        str(ROOT),
        "--sizes",
        "10,20",
        "--rounds",
        "1",
        "--passes",
        "1",
    )
    assert [s["nodes"] for s in out["sizes"]] == [10, 20]
    for size in out["sizes"]:
        assert size["this_cpu_median_ms"] > 0 and size["against_cpu_median_ms"] > 0
        # Worked out before rounding to 0.1 ms, which is coarse at these tiny sizes.
        assert size["ratio_this_to_against"] == pytest.approx(
            size["this_cpu_median_ms"] / size["against_cpu_median_ms"], rel=0.3
        )
        # The same pass and then the young collection after it: never less than the pass.
        assert size["this_with_collect_ms"] >= size["this_cpu_median_ms"]
        assert size["against_with_collect_ms"] >= size["against_cpu_median_ms"]
    assert out["interpreter"]["executable"] == sys.executable


def test_pass_compare_passes_on_packages_but_never_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run under another interpreter, the children need this environment's packages (on
    PYTHONPATH), but a checkout there would shadow the one being measured."""
    from bench import pass_compare

    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(site), ""]))
    assert pass_compare._passed_on() == [str(site)]


def test_pass_compare_refuses_what_is_not_a_checkout(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.pass_compare", "--against", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "is not a checkout of this repository" in done.stderr


def test_filter_verdicts_script_prints_sane_json() -> None:
    out = _run_json("bench.filter_verdicts", "--sizes", "60")
    (size,) = out["sizes"]
    assert size["declared_plan_equals_undeclared"] is True
    assert 0 < size["declared"]["filter_runs"] < size["undeclared"]["filter_runs"]


def test_quality_script_prints_sane_json() -> None:
    out = _run_json("bench.quality", "--instances", "5", "--time-limit-s", "2")
    assert out["instances"] == 5
    assert out["invalid_plans"] == 0, out["invalid_examples"]
    assert out["ours_above_optimum"] == 0
    for key in ("ours_vs_optimum", "first_fit_vs_optimum"):
        assert 0 < out[key]["min"] <= out[key]["mean"] <= 1.0 + 1e-9
    totals = out["placed_gpu_demand_total"]
    assert totals["optimum"] >= totals["ours"] and totals["optimum"] >= totals["first_fit"]


def test_render_job_script_prints_every_runtime_and_shape() -> None:
    out = _run_json("bench.render_job", "--repeat", "20")
    assert set(out["build_job"]) == {
        f"{r}/{s}" for r in ("vllm", "sglang") for s in ("one-gpu", "tp4", "tp8", "mig", "2-node")
    }
    for timing in out["build_job"].values():
        assert 0 < timing["median_us"] <= timing["p99_us"]


def test_signals_bench_runs_small() -> None:
    """bench/signals.py: every scraped replica answers, every model gets a TTFT p90 by the
    second read, and a broken TTFT objective leads to a registered job."""
    out = _run_json("bench.signals", "--replicas", "20", "--models", "4", "--trials", "1")
    scrape = out["scrape"]
    assert scrape["replicas"] == 20 and scrape["errors_last"] == 0
    assert scrape["models_with_ttft_last"] == 4
    assert all(t > 0 for t in scrape["scrape_s"])
    obj = out["objective"]
    assert obj["trials"] == 1 and obj["broken_to_registered_p50_ms"] > 0


def test_gateway_bench_runs_small() -> None:
    """Every figure comes out, on a tiny run; the requests were all answered."""
    out = _run_json(
        "bench.gateway", "--rates", "50", "--seconds", "0.4", "--max-seconds", "0.3",
        "--max-top", "100", "--held-reps", "1", "--zero-models", "1", "--cold-start-s", "0.2",
    )  # fmt: skip
    row = out["rates"]["50"]
    for kind in ("plain", "streaming"):
        assert row[kind]["direct"]["errors"] == row[kind]["gateway"]["errors"] == 0
        assert "added_p50_ms" in row[kind] and "added_p99_ms" in row[kind]
    assert "added_ttfb_p99_ms" in row["streaming"]
    assert out["gateway_max"]["max_rps_p99_under_50ms"] >= 0
    assert 0 <= out["held_first_byte"]["p99_ms"] < 5000
    assert out["scale_from_zero"]["wait_max_ms"] >= 200


def test_prefetch_cost_times_the_step_beside_the_pass() -> None:
    result = prefetch_cost.measure(20, 1)
    assert result["none"]["starts"] == 0
    assert result["half_at_1"]["starts"] == 2  # settings.prefetch_max: 2
    for case in ("none", "half_at_1", "all_at_2_caches_full"):
        assert 0 < result[case]["prefetch_ms"] < result[case]["pass_ms"] * 10
