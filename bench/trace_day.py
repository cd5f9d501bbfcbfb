"""Replay a day-long demand trace with two tenants, with preemption and without, and print
one JSON object: served demand, preemptions and churn for each run.

    .venv/bin/python -m bench.trace_day [--step-s 60] [--nodes 10] [--seed 0]

Tenant org/day serves interactive chat (critical and standard, busy in the daytime, quiet at
night, an on-demand coder used in bursts); tenant org/batch runs opportunistic batch work
(evaluations as 2x8 multi-node replicas, a 70B batch model, embeddings) that wants more than
the fleet all day. Each is guaranteed part of the fleet. A pass every --step-s seconds of the
trace; stops take one pass (the replica is `stopping` in between, as Nomad reports it).

served: per tenant and class, the requests the live replicas could carry (live x
target_per_replica, at most the load) over the load, summed over the day. preemptions: stops
for another model (gave_way: who for whom; took_turns: pairs that preempted each other, which
must stay empty); churn: all starts and stops. The run with `max_victims: 0` is the baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Replica, Snapshot, StartAction, StopAction
from scheduler.core.simulate import apply_plan

T0 = datetime(2026, 12, 2, 0, 0, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def _model(
    name: str, owner: str, cls: str, gpus: int, lo: int, hi: int, target: int, **kw: Any
) -> dict[str, Any]:
    shards = kw.pop("shards", 1)
    prof = {
        "name": "p",
        "gpus": gpus,
        "shards": shards,
        "cpu_cores": 8 * gpus,
        "memory_gb": 64 * gpus,
    }
    scaling = {"min": lo, "max": hi, "target_per_replica": target, **kw}
    return {"name": name, "owner": owner, "class": cls, "scaling": scaling, "profiles": [prof]}


MODELS = [
    _model("chat-70b", "org/day", "critical", 4, 1, 10, 16),
    _model("chat-8b", "org/day", "standard", 1, 1, 16, 32),
    _model("code-34b", "org/day", "standard", 2, 0, 6, 8, on_demand=True),
    _model("eval-405b", "org/batch", "opportunistic", 8, 0, 2, 4, shards=2),
    _model("batch-70b", "org/batch", "opportunistic", 4, 0, 12, 8),
    _model("embed", "org/batch", "opportunistic", 1, 0, 16, 64),
]
OWNER = {m["name"]: m["owner"] for m in MODELS}
CLASS = {m["name"]: m["class"] for m in MODELS}
TARGET = {m["name"]: m["scaling"]["target_per_replica"] for m in MODELS}


def _nodes(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        gpus = [{"id": f"n{i}-g{j}", "model": H100, "memory_gb": 80} for j in range(8)]
        out.append(
            {"id": f"n{i}", "name": f"gpu-{i}", "cpu_cores": 128, "memory_gb": 1024, "gpus": gpus}
        )
    return out


def load_at(name: str, t: float, rng: random.Random) -> int:
    """Requests in flight for a model at t seconds into the day."""
    hour = t / 3600
    day = max(math.sin((hour - 6) / 24 * 2 * math.pi), 0.0)  # 0 at night, 1 at 12:00
    noise = rng.uniform(0.85, 1.15)
    if name == "chat-70b":
        return round((10 + 140 * day) * noise)
    if name == "chat-8b":
        return round((20 + 400 * day) * noise)
    if name == "code-34b":  # bursts of a quarter hour, every two hours in the daytime
        return round(30 * noise) if day > 0.2 and int(t // 900) % 8 == 0 else 0
    if name == "eval-405b":
        return 8
    if name == "batch-70b":
        return round((60 + 40 * (1 - day)) * noise)
    return round(600 * noise)  # embed


def stop_slowly(snap: Snapshot, plan: Plan, advance_s: float) -> Snapshot:
    stopping = {a.replica: a for a in plan.actions if isinstance(a, StopAction)}
    kept: list[Replica] = []
    for r in snap.replicas:
        if r.state == "stopping":
            continue
        stop = stopping.get(r.id)
        if stop is not None:
            r = r.model_copy(update={"state": "stopping", "preempted_for": stop.preempted_for})
        kept.append(r)
    started = apply_plan(snap.model_copy(update={"replicas": []}), plan, advance_s)
    return started.model_copy(update={"replicas": kept + started.replicas})


def _first_snapshot(max_victims: int, nodes: int) -> Snapshot:
    return Snapshot.model_validate(
        {
            "now": T0.isoformat(),
            "settings": {"max_victims": max_victims},
            "nodes": _nodes(nodes),
            "models": MODELS,
            "quotas": [
                {"owner": "org/day", "guarantee": {"gpus": nodes * 8 // 2}},
                {"owner": "org/batch", "guarantee": {"gpus": nodes * 8 // 4}},
            ],
        }
    )


def _demand_at(t: int, now: datetime, rng: random.Random) -> dict[str, dict[str, Any]]:
    demand = {}
    for m in MODELS:
        load = load_at(m["name"], t, rng)
        demand[m["name"]] = {
            "inflight": load,
            **({"last_used": now.isoformat()} if load else {}),
        }
    return demand


def _count_served(
    snap: Snapshot, demand: dict[str, dict[str, Any]], served: dict[str, list[float]]
) -> None:
    """Add what each owner (and owner/class) was asked and could serve with what runs."""
    live: dict[str, int] = {}
    for r in snap.replicas:
        if r.counts:
            live[r.model] = live.get(r.model, 0) + 1
    for name, d in demand.items():
        load = d["inflight"]
        carried = min(load, live.get(name, 0) * TARGET[name])
        for key in (OWNER[name], f"{OWNER[name]}/{CLASS[name]}"):
            acc = served.setdefault(key, [0.0, 0.0])
            acc[0] += carried
            acc[1] += load


def replay(max_victims: int, nodes: int, step_s: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    snap = _first_snapshot(max_victims, nodes)
    served: dict[str, list[float]] = {}  # key -> [served, load]
    starts = stops = preemptions = 0
    pairs: set[tuple[str, str]] = set()  # (gave way, preempted for)
    pass_ms: list[float] = []
    for k in range(86400 // step_s):
        t = k * step_s
        now = T0 + timedelta(seconds=t)
        demand = _demand_at(t, now, rng)
        snap = snap.model_copy(
            update={
                "demand": Snapshot.model_validate({"now": now.isoformat(), "demand": demand}).demand
            }
        )
        began = time.perf_counter()
        plan = decide(snap)
        pass_ms.append((time.perf_counter() - began) * 1000)
        _count_served(snap, demand, served)
        for a in plan.actions:
            if isinstance(a, StartAction):
                starts += 1
            else:
                stops += 1
                if a.preempted_for is not None:
                    preemptions += 1
                    pairs.add((a.model, a.preempted_for))
        snap = stop_slowly(snap, plan, step_s)
    pass_ms.sort()
    return {
        "max_victims": max_victims,
        "served": {k: round(v[0] / v[1], 4) if v[1] else None for k, v in sorted(served.items())},
        "preemptions": preemptions,
        "gave_way": sorted(f"{v} for {p}" for v, p in pairs),
        "took_turns": sorted(f"{v} and {p}" for v, p in pairs if (p, v) in pairs),
        "churn": {"starts": starts, "stops": stops},
        "pass_ms_median": round(pass_ms[len(pass_ms) // 2], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-s", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    runs = [replay(mv, args.nodes, args.step_s, args.seed) for mv in (3, 0)]
    print(
        json.dumps(
            {
                "bench": "trace_day",
                "nodes": args.nodes,
                "gpus": args.nodes * 8,
                "step_s": args.step_s,
                "seed": args.seed,
                "with_preemption": runs[0],
                "without_preemption": runs[1],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
