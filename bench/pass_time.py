"""Time one full decision pass on synthetic fleets and print one JSON object.

    .venv/bin/python -m bench.pass_time [--sizes 100,1000,4000] [--quick] [--seed 0]

For each size (nodes of 8 GPUs, 2 models per node, a tenth of the GPUs in MIG mode, in a
steady state built by bench/fleetgen.py) it runs decide() once to warm up, then N times
(N adapts so a size takes about --budget-s seconds) and reports the median and p90 wall
and CPU time, placements per second (start actions / median pass), the tracemalloc peak of
one extra pass, and how the time grows with nodes x models and with the cluster's size (the
nodes, with the models grown alike: log-log slopes over the sizes). For ratios against another
checkout measured in the same run, see bench/pass_compare.py.
Snapshot construction is not timed. decide() is plain single-threaded Python, timed as the
service runs it: with the cyclic collector paused for the pass
(scheduler/service/collector.py); `median_ms_collector_on` is the same pass with it left on,
measured in the same run, interleaved.

The quiet pass (bench/service_passes.py): the snapshot's plans applied until one has no
actions (a settled fleet, as most service passes find it), that pass kept by the service's own
carry-over (Service._keep, as after a full pass), then Service.run_pass() timed as the service
runs it: the check that nothing changed (every watch's version, leadership, the actuator, the clock
against calm_until) and what a carried pass still does (scale-down marks, counters, the
Prometheus observer). No network: nothing is read on that path.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import describe, steady_snapshot
from bench.interpreter import describe as describe_interpreter
from bench.service_passes import quiet_pass, service_pass
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.service.collector import collector_paused

# Targets: a pass at 1,000 nodes within 100 ms (the older bound) and 50 ms, 1 s at 10,000,
# a log-log slope in cluster size (nodes and models grown together) of at most 1.1, and a
# quiet pass, carried over, within 5 ms at 1,000 nodes.
TARGET_NODES = 1000
TARGET_MEDIAN_MS = 100.0
TARGET_MEDIAN_MS_TIGHT = 50.0
TARGET_LARGE_NODES, TARGET_LARGE_MS = 10000, 1000.0
TARGET_SLOPE_IN_SIZE = 1.1
TARGET_QUIET_MS = 5.0

Decide = Callable[[Snapshot], Plan]


def load_decide() -> Decide:
    from scheduler.core.decide import decide

    return decide


def core_build_name() -> str:
    import scheduler

    return f"{scheduler.CORE_BUILD} ({scheduler.CORE_BUILD_WHY})"


def load_apply_plan() -> Callable[[Snapshot, Plan], Snapshot] | None:
    try:
        from scheduler.core.simulate import apply_plan
    except ImportError:
        return None
    return apply_plan


def after_apply_ms(decide: Decide, snapshot: Snapshot, runs: int) -> float | None:
    """Median pass on the snapshot with the first plan applied: what most passes of a running
    service see (little left to do)."""
    apply_plan = load_apply_plan()
    if apply_plan is None:
        return None
    settled = apply_plan(snapshot, decide(snapshot))
    walls = []
    for _ in range(runs):
        gc.collect()
        with collector_paused():
            w0 = time.perf_counter()
            decide(settled)
            walls.append(time.perf_counter() - w0)
    return round(statistics.median(walls) * 1000, 2)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def time_passes(
    decide: Decide, snapshot: Snapshot, budget_s: float, max_runs: int
) -> dict[str, Any]:
    """Warm-up pass, then N timed passes with N = budget / first pass, clamped to [3, max_runs]."""
    gc.collect()
    plan = decide(snapshot)  # warm-up; also the plan whose actions we count
    walls: list[float] = []
    cpus: list[float] = []
    walls_on: list[float] = []  # the collector left on, side by side
    collects: list[float] = []  # the young collection after a pass: what it left in cycles
    left = 0
    runs = max_runs
    while len(walls) < runs:
        gc.collect()
        with collector_paused():  # as the service runs a pass
            c0, w0 = time.process_time(), time.perf_counter()
            decide(snapshot)
            w1, c1 = time.perf_counter(), time.process_time()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
        left = gc.collect(0)
        collects.append(time.perf_counter() - w1)
        gc.collect()
        w0 = time.perf_counter()
        decide(snapshot)
        walls_on.append(time.perf_counter() - w0)
        if len(walls) == 1:
            runs = max(3, min(max_runs, int(budget_s / max(2 * walls[0], 1e-6))))
    starts = sum(1 for a in plan.actions if isinstance(a, StartAction))
    stops = sum(1 for a in plan.actions if isinstance(a, StopAction))
    median = statistics.median(walls)
    return {
        "runs": len(walls),
        "median_ms": round(median * 1000, 2),
        "p90_ms": round(_quantile(walls, 0.9) * 1000, 2),
        "min_ms": round(min(walls) * 1000, 2),
        "cpu_median_ms": round(statistics.median(cpus) * 1000, 2),
        "median_ms_collector_on": round(statistics.median(walls_on) * 1000, 2),
        # The service's loop frees what a pass leaves in reference cycles once the collector is
        # back on: none should be left (tests/core/test_pass_garbage.py).
        "objects_left_in_cycles": left,
        "collect_after_median_ms": round(statistics.median(collects) * 1000, 2),
        "starts": starts,
        "stops": stops,
        "placements_per_s": round(starts / median, 1) if median > 0 else 0.0,
        "pending_models": sum(1 for s in plan.models.values() if s.pending),
    }


def traced_peak_mb(decide: Decide, snapshot: Snapshot) -> float:
    """Peak Python heap allocated during one pass (tracemalloc; the snapshot itself excluded)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    decide(snapshot)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return round((peak - base) / 2**20, 2)


def growth(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """Time ratio against work ratio (work = nodes x models) between consecutive sizes, and the
    least-squares log-log slope over all sizes: 1.0 is linear in nodes x models."""
    steps = []
    for a, b in itertools.pairwise(sizes):
        work = b["work"] / a["work"]
        ratio = b["median_ms"] / a["median_ms"] if a["median_ms"] > 0 else math.inf
        steps.append(
            {
                "from_nodes": a["nodes"],
                "to_nodes": b["nodes"],
                "work_ratio": round(work, 2),
                "time_ratio": round(ratio, 2),
                "exponent": round(math.log(ratio) / math.log(work), 3) if work > 1 else None,
            }
        )
    return {
        "steps": steps,
        "fit_exponent_vs_nodes_x_models": _slope(sizes, "work"),
        # The fleet grown as a whole (2 models a node): 1.0 is linear in the cluster's size.
        "fit_exponent_vs_cluster_size": _slope(sizes, "nodes"),
    }


def _slope(sizes: list[dict[str, Any]], x: str) -> float | None:
    """Least-squares slope of log(median pass) against log(sizes[x])."""
    return log_slope([s[x] for s in sizes], [max(s["median_ms"], 1e-6) for s in sizes])


def log_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(ys) against log(xs); None for fewer than two points."""
    if len(xs) < 2:
        return None
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    den = sum((v - mx) ** 2 for v in lx)
    return round(sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den, 3)


def run(sizes: list[int], seed: int, budget_s: float, max_runs: int) -> dict[str, Any]:
    decide = load_decide()
    results: list[dict[str, Any]] = []
    for n in sizes:
        t0 = time.perf_counter()
        snapshot = steady_snapshot(n, seed=seed)
        build_s = time.perf_counter() - t0
        facts = describe(snapshot)
        timing = time_passes(decide, snapshot, budget_s, max_runs)
        results.append(
            {
                **facts,
                "work": facts["nodes"] * facts["models"],
                "build_s": round(build_s, 2),
                **timing,
                "tracemalloc_peak_mb": traced_peak_mb(decide, snapshot),
                "after_apply_median_ms": after_apply_ms(decide, snapshot, min(5, timing["runs"])),
                "quiet_pass": quiet_pass(decide, snapshot, 200),
            }
        )
        del snapshot
    grow = growth(results)
    return {
        "bench": "pass_time",
        "python": platform.python_version(),
        # Figures from different CPython builds differ by about a fifth (bench/interpreter.py).
        "interpreter": describe_interpreter(),
        "machine": platform.machine(),
        "cpus_visible": len(os.sched_getaffinity(0)),
        "threads": "single (decide runs in one thread)",
        # mypyc: the compiled core setup.py built; pure: the Python modules (and why).
        "core_build": core_build_name(),
        "seed": seed,
        "sizes": results,
        "growth": grow,
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "targets": _targets(results, grow),
    }


def _targets(results: list[dict[str, Any]], grow: dict[str, Any]) -> dict[str, bool | None]:
    """Each target met or not (None: its size was not run)."""
    at_target = next((r for r in results if r["nodes"] == TARGET_NODES), None)
    large = next((r for r in results if r["nodes"] == TARGET_LARGE_NODES), None)
    slope = grow["fit_exponent_vs_nodes_x_models"]
    in_size = grow["fit_exponent_vs_cluster_size"]
    return {
        "median_ms_at_1000_nodes_le_100": (
            None if at_target is None else at_target["median_ms"] <= TARGET_MEDIAN_MS
        ),
        "median_ms_at_1000_nodes_le_50": (
            None if at_target is None else at_target["median_ms"] <= TARGET_MEDIAN_MS_TIGHT
        ),
        "median_ms_at_10000_nodes_le_1000": (
            None if large is None else large["median_ms"] <= TARGET_LARGE_MS
        ),
        "growth_at_most_linear_in_nodes_x_models": None if slope is None else slope <= 1.0,
        "growth_in_cluster_size_at_most_1_1": (
            None if in_size is None else in_size <= TARGET_SLOPE_IN_SIZE
        ),
        "quiet_pass_median_ms_at_1000_nodes_le_5": (
            None
            if at_target is None or "median_ms" not in at_target["quiet_pass"]
            else at_target["quiet_pass"]["median_ms"] <= TARGET_QUIET_MS
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,4000", help="node counts, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few runs per size (smoke tests)")
    parser.add_argument("--budget-s", type=float, default=12.0, help="timed seconds per size")
    parser.add_argument("--pin", type=int, default=None, help="pin the process to this CPU")
    parser.add_argument(
        "--service-models",
        type=int,
        default=0,
        help="also time full against carried service passes on the stand-ins, this many models",
    )
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes needs at least one positive node count")
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    budget, max_runs = (0.5, 3) if args.quick else (args.budget_s, 51)
    out = run(sorted(sizes), args.seed, budget, max_runs)
    if args.service_models > 0:
        with contextlib.redirect_stdout(sys.stderr):  # the service's log lines
            out["service_pass"] = service_pass(args.service_models)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
