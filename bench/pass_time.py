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

The quiet pass (issue 15): the snapshot's plans applied until one has no actions (a settled
fleet, as most service passes find it), that pass kept by the service's own carry-over
(Service._keep, as after a full pass), then Service.run_pass() timed as the service runs it:
the check that nothing changed (every watch's version, leadership, the actuator, the clock
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
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.service.collector import collector_paused

TARGET_NODES = 1000
TARGET_MEDIAN_MS = 100.0  # issue 12: the pass before quotas and fair share, about 100-110 ms
# Issue 15: 50 ms at 1,000 nodes, 1 s at 10,000, and a log-log slope in cluster size (nodes
# and models grown together) of at most 1.1.
TARGET_MEDIAN_MS_15 = 50.0
TARGET_LARGE_NODES, TARGET_LARGE_MS = 10000, 1000.0
TARGET_SLOPE_IN_SIZE = 1.1
TARGET_QUIET_MS = 5.0  # issue 15: a quiet pass, carried over, at 1,000 nodes

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


def quiet_pass(decide: Decide, snapshot: Snapshot, runs: int) -> dict[str, Any]:
    """The carried-over pass of a settled fleet, through Service.run_pass (see the module doc)."""
    from datetime import timedelta

    from scheduler.adapters.catalog import Catalog
    from scheduler.adapters.snapshot_builder import ClusterView
    from scheduler.core.calm import calm_until
    from scheduler.core.simulate import apply_plan
    from scheduler.ops.metrics import MetricsObserver
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    plan = decide(snapshot)
    settled_after = 0
    while plan.actions and settled_after < 12:
        snapshot = apply_plan(snapshot, plan, 10)
        plan = decide(snapshot)
        settled_after += 1
    if plan.actions:
        return {"settled": False, "settled_after_passes": settled_after}
    w0 = time.perf_counter()
    decide(snapshot)
    decide_ms = (time.perf_counter() - w0) * 1000
    # Nothing listens there: a pass that was not carried over would fail loudly.
    config = ServiceConfig(nomad_addr="http://127.0.0.1:9", consul_addr="127.0.0.1:9")
    svc = Service(config, observers=[MetricsObserver()])
    svc.watches = svc._watches()  # the service's own watches, not started: nothing changes
    started = time.monotonic()
    svc.clock = lambda: snapshot.now + timedelta(seconds=time.monotonic() - started)
    view = ClusterView(snapshot, {}, [], Catalog(), set(), set())
    inputs = svc._inputs()
    assert inputs is not None
    w0 = time.perf_counter()
    svc._keep(view, plan, inputs)  # what the full pass adds to keep itself (calm_until)
    keep_ms = (time.perf_counter() - w0) * 1000
    walls: list[float] = []
    for _ in range(runs):
        before = svc.carry.carried
        w0 = time.perf_counter()
        out = svc.run_pass()
        walls.append(time.perf_counter() - w0)
        assert out is plan and svc.carry.carried == before + 1, "the pass was not carried over"
    until = calm_until(snapshot, plan)
    return {
        "settled": True,
        "measures": "Service.run_pass() carried over: the check that nothing changed, and what "
        "a carried pass still does (no read, no decide, no write)",
        "settled_after_passes": settled_after,
        "runs": runs,
        "median_ms": round(statistics.median(walls) * 1000, 4),
        "p90_ms": round(_quantile(walls, 0.9) * 1000, 4),
        "decide_on_settled_ms": round(decide_ms, 2),
        "keep_ms": round(keep_ms, 2),
        "calm_for_s": None if until is None else (until - snapshot.now).total_seconds(),
    }


class _PassTimes:
    """An observer of the service: each pass's duration, full or carried over."""

    def __init__(self) -> None:
        self.full: list[float] = []
        self.carried: list[float] = []

    def pass_finished(self, snapshot: Any, plan: Plan, duration_s: float, errors: Any) -> None:
        self.full.append(duration_s)

    def pass_carried(self, duration_s: float, errors: Any) -> None:
        self.carried.append(duration_s)

    def action_done(self, action: Any, ok: bool, error: str | None) -> None:
        pass


def service_pass(n_models: int) -> dict[str, Any]:
    """Full against carried passes of the service itself, on the loopback stand-ins (in this
    process: they share its CPU): `n_models` one-GPU models with one replica each, settled;
    then full passes forced by a settings edit that changes no plan, and the carried passes
    between them."""
    import consul as py_consul
    from llm_scheduler_standins.devcluster import DevCluster
    from scheduler.core.models import GPU, Node
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    h100 = "NVIDIA H100 80GB HBM3"
    nodes = [
        Node(
            id=f"node-{i:04d}",
            name=f"n{i}",
            cpu_cores=256,
            memory_gb=4096,
            gpus=[GPU(id=f"GPU-{i}-{g}", model=h100, memory_gb=80) for g in range(8)],
        )
        for i in range(n_models // 4 + 1)
    ]
    model = {
        "owner": "bench",
        "scaling": {"min": 0, "max": 1, "target_per_replica": 1},
        "profiles": [{"name": "one", "gpus": 1}],
        "serve": {"source": "org/bench-model"},
    }
    base = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0}
    settings = json.dumps(base)
    times = _PassTimes()
    with DevCluster(fleet=nodes, load_delay_s=0.05) as dc:
        host, port = dc.consul_url.removeprefix("http://").split(":")
        kv = py_consul.Consul(host=host, port=int(port)).kv
        kv.put("llm-scheduler/settings", settings)
        for i in range(n_models):
            kv.put(f"llm-scheduler/models/m{i:04d}", json.dumps(model))
            kv.put(f"llm-scheduler/demand/m{i:04d}", json.dumps({"inflight": 1}))
        config = ServiceConfig(
            nomad_addr=dc.nomad_url,
            consul_addr=dc.consul_url,
            pass_interval_s=0.2,
            watch_wait_s=5.0,
            lock_delay_s=0,
        )
        svc = Service(config, observers=[times])
        svc.run_in_thread()
        try:
            started = time.monotonic()
            while len(times.carried) < 5:
                if time.monotonic() - started > 300:
                    return {"settled": False, "full_passes": len(times.full)}
                time.sleep(0.2)
            full, carried = len(times.full), len(times.carried)
            for i in range(10):
                # Consul skips a write of the same value (kvsSetTxn): max_victims 3 / 4 in
                # turn, which changes nothing here (no preemption), makes the next pass full.
                kv.put("llm-scheduler/settings", json.dumps({**base, "max_victims": 3 + i % 2}))
                time.sleep(0.6)
            full_s, carried_s = times.full[full:], times.carried[carried:]
        finally:
            svc.stop()
    return {
        "settled": True,
        "measures": "Service.run_pass() against the loopback stand-ins in this process, from "
        "the service's own observer: full passes (reads, decide, status) forced by a "
        "settings edit that changes no plan, and the carried passes between them",
        "models": n_models,
        "nodes": len(nodes),
        "settle_s": round(time.monotonic() - started, 1),
        "full_passes": len(full_s),
        "full_median_ms": round(statistics.median(full_s) * 1000, 2) if full_s else None,
        "carried_passes": len(carried_s),
        "carried_median_ms": round(statistics.median(carried_s) * 1000, 4) if carried_s else None,
    }


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
    at_target = next((r for r in results if r["nodes"] == TARGET_NODES), None)
    large = next((r for r in results if r["nodes"] == TARGET_LARGE_NODES), None)
    grow = growth(results)
    slope = grow["fit_exponent_vs_nodes_x_models"]
    in_size = grow["fit_exponent_vs_cluster_size"]
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
        "targets": {
            "median_ms_at_1000_nodes_le_100": (
                None if at_target is None else at_target["median_ms"] <= TARGET_MEDIAN_MS
            ),
            "median_ms_at_1000_nodes_le_50": (
                None if at_target is None else at_target["median_ms"] <= TARGET_MEDIAN_MS_15
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
        },
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
