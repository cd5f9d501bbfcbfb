"""Time one full decision pass on synthetic fleets and print one JSON object.

    .venv/bin/python -m bench.pass_time [--sizes 100,1000,4000] [--quick] [--seed 0]

For each size (nodes of 8 GPUs, 2 models per node, a tenth of the GPUs in MIG mode, in a
steady state built by bench/fleetgen.py) it runs decide() once to warm up, then N times
(N adapts so a size takes about --budget-s seconds) and reports the median and p90 wall
and CPU time, placements per second (start actions / median pass), the tracemalloc peak of
one extra pass, and how the time grows with nodes x models (log-log slope between sizes).
Snapshot construction is not timed. decide() is plain single-threaded Python, timed as the
service runs it: with the cyclic collector paused for the pass
(scheduler/service/collector.py); `median_ms_collector_on` is the same pass with it left on,
measured in the same run, interleaved.
"""

from __future__ import annotations

import argparse
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
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.service.collector import collector_paused

TARGET_NODES = 1000
TARGET_MEDIAN_MS = 100.0

Decide = Callable[[Snapshot], Plan]


def load_decide() -> Decide:
    from scheduler.core.decide import decide

    return decide


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
    runs = max_runs
    while len(walls) < runs:
        gc.collect()
        with collector_paused():  # as the service runs a pass
            c0, w0 = time.process_time(), time.perf_counter()
            decide(snapshot)
            w1, c1 = time.perf_counter(), time.process_time()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
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
    slope = None
    if len(sizes) >= 2:
        xs = [math.log(s["work"]) for s in sizes]
        ys = [math.log(max(s["median_ms"], 1e-6)) for s in sizes]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope = round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den, 3)
    return {"steps": steps, "fit_exponent_vs_nodes_x_models": slope}


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
            }
        )
        del snapshot
    at_target = next((r for r in results if r["nodes"] == TARGET_NODES), None)
    grow = growth(results)
    slope = grow["fit_exponent_vs_nodes_x_models"]
    return {
        "bench": "pass_time",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus_visible": len(os.sched_getaffinity(0)),
        "threads": "single (decide is plain Python, one thread)",
        "seed": seed,
        "sizes": results,
        "growth": grow,
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "targets": {
            "median_ms_at_1000_nodes_le_100": (
                None if at_target is None else at_target["median_ms"] <= TARGET_MEDIAN_MS
            ),
            "growth_at_most_linear_in_nodes_x_models": None if slope is None else slope <= 1.0,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,4000", help="node counts, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few runs per size (smoke tests)")
    parser.add_argument("--budget-s", type=float, default=12.0, help="timed seconds per size")
    parser.add_argument("--pin", type=int, default=None, help="pin the process to this CPU")
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
    print(json.dumps(run(sorted(sizes), args.seed, budget, max_runs), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
