"""Placement quality on small random instances: decide() against the CP-SAT optimum and a
first-fit baseline, in the same run; prints one JSON object.

    .venv/bin/python -m bench.quality [--instances 300] [--seed 0] [--time-limit-s 2]

Every instance is pure capacity: 2-6 nodes of 2-8 whole GPUs (H100 80GB or A100 40GB),
3-10 models of one profile each (1/2/4/8 GPUs per shard, a few with 2 shards, some limited
to H100), each wanting a fixed count; one class, no quotas, no MIG, no existing replicas,
CPU and memory never binding. So the rules (class, quota, preemption) cannot make decide()
place less than pure capacity allows, and the optimum is the right yardstick. The measure
is placed GPU demand: the GPUs of all replicas started from the empty cluster (decide() is
run pass after pass, applying its plan, until it starts nothing more).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.fleet import CachedSnapshot, NodeCache
from scheduler.core.models import (
    GPU,
    Demand,
    Model,
    Node,
    Plan,
    Profile,
    Scaling,
    Serve,
    Snapshot,
    StartAction,
)

NOW = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
GPU_TYPES = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")
EPS = 1e-9


@dataclass(frozen=True)
class QNode:
    id: str
    gpu_model: str
    gpus: int


@dataclass(frozen=True)
class QModel:
    name: str
    gpus: int  # per shard
    shards: int
    only: str | None  # gpu_models substring, or any
    count: int

    def fits_type(self, gpu_model: str) -> bool:
        return self.only is None or self.only in gpu_model

    @property
    def replica_gpus(self) -> int:
        return self.gpus * self.shards


@dataclass(frozen=True)
class Instance:
    nodes: tuple[QNode, ...]
    models: tuple[QModel, ...]


def random_instance(rng: random.Random) -> Instance:
    nodes = tuple(
        QNode(f"n{i}", rng.choice(GPU_TYPES), rng.choice((2, 4, 4, 8, 8)))
        for i in range(rng.randint(2, 6))
    )
    models = []
    for j in range(rng.randint(3, 10)):
        shards = 2 if rng.random() < 0.1 else 1
        models.append(
            QModel(
                name=f"m{j}",
                gpus=rng.choices((1, 2, 4, 8), (0.4, 0.3, 0.2, 0.1))[0],
                shards=shards,
                only="H100" if rng.random() < 0.25 else None,
                count=rng.randint(1, 4),
            )
        )
    return Instance(nodes, tuple(models))


def to_snapshot(inst: Instance, cached: dict[str, list[str]] | None = None) -> Snapshot:
    """The instance as a snapshot; with `cached` (node -> models), each model serves org/NAME
    and each node's model cache holds the weights of the models listed for it."""
    nodes = []
    for n in inst.nodes:
        ids = [f"GPU-{n.id}-{g}" for g in range(n.gpus)]
        gpus = [
            GPU(
                id=gid,
                model=n.gpu_model,
                memory_gb=80 if "80GB" in n.gpu_model else 40,
                nvlink_peers=[p for p in ids if p != gid],
            )
            for gid in ids
        ]
        cache = None
        if cached is not None:
            held = [
                CachedSnapshot(source=f"org/{m}", commit=f"{i + 1:040x}", revisions=["main"])
                for i, m in enumerate(cached.get(n.id, []))
            ]
            cache = NodeCache(volume="llm-model-cache", snapshots=held)
        nodes.append(
            Node(id=n.id, name=n.id, cpu_cores=1024, memory_gb=8192, gpus=gpus, cache=cache)
        )
    models = [
        Model(
            name=m.name,
            owner="org/team",
            class_="standard",
            serve=None if cached is None else Serve(source=f"org/{m.name}"),
            scaling=Scaling(min=m.count, max=m.count),
            profiles=[
                Profile(
                    name="p",
                    gpus=m.gpus,
                    shards=m.shards,
                    gpu_models=None if m.only is None else [m.only],
                )
            ],
        )
        for m in inst.models
    ]
    demand = {m.name: Demand(inflight=16 * m.count, last_used=NOW) for m in inst.models}
    return Snapshot(now=NOW, nodes=nodes, models=models, demand=demand)


def random_caches(inst: Instance, seed: int, index: int) -> dict[str, list[str]]:
    rng = random.Random(f"quality-caches-{seed}-{index}")
    return {n.id: [m.name for m in inst.models if rng.random() < 0.5] for n in inst.nodes}


# ---------------------------------------------------------------- the three placers


Decide = Callable[[Snapshot], Plan]
ApplyPlan = Callable[[Snapshot, Plan], Snapshot]


def ours(
    inst: Instance,
    decide: Decide,
    apply_plan: ApplyPlan,
    max_passes: int = 20,
    cached: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Placed GPU demand of decide() from the empty cluster, with a validity check of every
    start (each GPU used once, on a node of the right type, shards on distinct nodes)."""
    snapshot = to_snapshot(inst, cached)
    by_name = {m.name: m for m in inst.models}
    node_type = {n.id: n.gpu_model for n in inst.nodes}
    used: set[str] = set()
    placed = 0
    passes = 0
    problems: list[str] = []
    for passes in range(1, max_passes + 1):  # noqa: B007 - reported below
        plan = decide(snapshot)
        starts = [a for a in plan.actions if isinstance(a, StartAction)]
        if not starts:
            break
        for a in starts:
            m = by_name[a.model]
            if len(a.shards) != m.shards or len({s.node for s in a.shards}) != m.shards:
                problems.append(f"{a.replica}: wrong shards")
            for s in a.shards:
                if len(s.gpus) != m.gpus or not m.fits_type(node_type[s.node]):
                    problems.append(f"{a.replica}: wrong GPUs on {s.node}")
                for g in s.gpus:
                    if g in used:
                        problems.append(f"{a.replica}: GPU {g} given twice")
                    used.add(g)
            placed += m.replica_gpus
        snapshot = apply_plan(snapshot, plan)
    live = {m.name: 0 for m in inst.models}
    for r in snapshot.replicas:
        if r.counts:
            live[r.model] += 1
    problems += [
        f"{n}: {c} replicas, wants {by_name[n].count}"
        for n, c in live.items()
        if c > by_name[n].count
    ]
    return {"placed": placed, "passes": passes, "problems": problems}


def first_fit(inst: Instance) -> int:
    """Models in order, each replica on the first node(s) with room; all shards or none."""
    free = {n.id: n.gpus for n in inst.nodes}
    types = {n.id: n.gpu_model for n in inst.nodes}
    placed = 0
    for m in inst.models:
        for _ in range(m.count):
            chosen = [nid for nid in free if free[nid] >= m.gpus and m.fits_type(types[nid])][
                : m.shards
            ]
            if len(chosen) < m.shards:
                break
            for nid in chosen:
                free[nid] -= m.gpus
            placed += m.replica_gpus
    return placed


def optimum(inst: Instance, time_limit_s: float) -> tuple[int, bool, float]:
    """The most GPU demand any placement can hold: CP-SAT over replicas x shards x nodes.
    Returns (value, proven optimal, upper bound)."""
    from ortools.sat.python import cp_model

    cp = cp_model.CpModel()
    load: dict[str, list[Any]] = {n.id: [] for n in inst.nodes}
    objective = []
    for m in inst.models:
        hosts = [n for n in inst.nodes if m.fits_type(n.gpu_model) and n.gpus >= m.gpus]
        if m.shards == 1:
            # Replicas of a single-shard model are interchangeable: count them per node.
            per_node = []
            for n in hosts:
                y = cp.new_int_var(0, min(m.count, n.gpus // m.gpus), f"y_{m.name}_{n.id}")
                per_node.append(y)
                load[n.id].append(m.gpus * y)
            if per_node:
                cp.add(sum(per_node) <= m.count)
                objective.append(m.gpus * sum(per_node))
            continue
        previous = None
        for r in range(m.count):
            z = cp.new_bool_var(f"z_{m.name}_{r}")
            shard_vars = []
            for n in hosts:
                s = cp.new_bool_var(f"s_{m.name}_{r}_{n.id}")
                shard_vars.append(s)
                load[n.id].append(m.gpus * s)
            cp.add(sum(shard_vars) == m.shards * z)
            if previous is not None:
                cp.add(previous >= z)  # symmetry: replica r only if r-1
            previous = z
            objective.append(m.replica_gpus * z)
    for n in inst.nodes:
        if load[n.id]:
            cp.add(sum(load[n.id]) <= n.gpus)
    cp.maximize(sum(objective))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(cp)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0, False, float("inf")
    return round(solver.objective_value), status == cp_model.OPTIMAL, solver.best_objective_bound


# ---------------------------------------------------------------- the run


def _ratio(value: int, best: int) -> float:
    return 1.0 if best == 0 else value / best


def _summary(ratios: list[float]) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(ratios), 5),
        "min": round(min(ratios), 5),
        "share_at_100pct": round(sum(1 for r in ratios if r >= 1 - EPS) / len(ratios), 4),
    }


def load_core() -> tuple[Decide, ApplyPlan]:
    from scheduler.core.decide import decide
    from scheduler.core.simulate import apply_plan

    return decide, apply_plan


@dataclass
class _Tally:
    """What the instances add up to."""

    ours_r: list[float] = field(default_factory=list)
    warm_r: list[float] = field(default_factory=list)  # with model caches on the nodes
    warm_placed: int = 0
    ff_r: list[float] = field(default_factory=list)
    totals: dict[str, int] = field(
        default_factory=lambda: {"ours": 0, "first_fit": 0, "optimum": 0}
    )
    not_proven: int = 0
    invalid: list[str] = field(default_factory=list)
    above_optimum: int = 0
    worst: list[dict[str, Any]] = field(default_factory=list)
    t_ours: float = 0.0
    t_opt: float = 0.0
    max_passes: int = 0

    def add(self, index: int, mine: dict[str, Any], best: int, proven: bool, ff: int) -> None:
        self.not_proven += 0 if proven else 1
        self.max_passes = max(self.max_passes, mine["passes"])
        if mine["problems"]:
            self.invalid.append(f"instance {index}: {'; '.join(mine['problems'][:3])}")
        if mine["placed"] > best:
            self.above_optimum += 1  # only possible if the plan is invalid or CP-SAT not proven
        ratio = _ratio(mine["placed"], best)
        self.ours_r.append(min(1.0, ratio) if proven else ratio)
        self.ff_r.append(_ratio(ff, best))
        self.totals["ours"] += mine["placed"]
        self.totals["first_fit"] += ff
        self.totals["optimum"] += best
        if self.ours_r[-1] < 1 - EPS:
            self.worst.append(
                {"instance": index, "ours": mine["placed"], "optimum": best, "first_fit": ff}
            )


def run(
    instances: int, seed: int, time_limit_s: float, core: tuple[Decide, ApplyPlan] | None = None
) -> dict[str, Any]:
    decide, apply_plan = core or load_core()
    rng = random.Random(f"quality-{seed}")
    tally = _Tally()
    started = time.perf_counter()
    for index in range(instances):
        inst = random_instance(rng)
        t0 = time.perf_counter()
        mine = ours(inst, decide, apply_plan)
        t1 = time.perf_counter()
        best, proven, _bound = optimum(inst, time_limit_s)
        t2 = time.perf_counter()
        tally.t_ours += t1 - t0
        tally.t_opt += t2 - t1
        tally.add(index, mine, best, proven, first_fit(inst))
        warm = ours(inst, decide, apply_plan, cached=random_caches(inst, seed, index))
        tally.warm_placed += warm["placed"]
        tally.warm_r.append(min(1.0, _ratio(warm["placed"], best)))
    tally.worst.sort(key=lambda w: w["ours"] / max(w["optimum"], 1))
    totals = tally.totals
    share = totals["ours"] / totals["optimum"] if totals["optimum"] else 1.0
    return {
        "bench": "quality",
        "seed": seed,
        "instances": instances,
        "cpsat_time_limit_s": time_limit_s,
        "cpsat_not_proven_optimal": tally.not_proven,
        "ours_vs_optimum": _summary(tally.ours_r),
        "first_fit_vs_optimum": _summary(tally.ff_r),
        "placed_gpu_demand_total": totals,
        "ours_share_of_optimum_total": round(share, 5),
        "with_caches": {
            "ours_vs_optimum": _summary(tally.warm_r),
            "ours_share_of_optimum_total": round(
                tally.warm_placed / totals["optimum"] if totals["optimum"] else 1.0, 5
            ),
        },
        "invalid_plans": len(tally.invalid),
        "invalid_examples": tally.invalid[:5],
        "ours_above_optimum": tally.above_optimum,
        "max_passes_to_converge": tally.max_passes,
        "worst": tally.worst[:5],
        "seconds": {
            "ours": round(tally.t_ours, 2),
            "cpsat": round(tally.t_opt, 2),
            "total": round(time.perf_counter() - started, 2),
        },
        "targets": {
            "ours_total_at_least_99pct_of_optimum": share >= 0.99,
            "ours_mean_ratio_at_least_99pct": statistics.fmean(tally.ours_r) >= 0.99,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit-s", type=float, default=2.0, help="CP-SAT limit per instance")
    args = parser.parse_args(argv)
    if args.instances < 1:
        parser.error("--instances must be at least 1")
    print(json.dumps(run(args.instances, args.seed, args.time_limit_s), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
