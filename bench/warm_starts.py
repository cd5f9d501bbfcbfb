"""Warm starts over a day of on-demand traffic: the same trace replayed three times in one
run: off (the scheduler sees no cache, prefetches nothing), `placement` (cache-aware placement:
it sees each node's model cache) and `placement_prefetch` (the whole feature: that, and each
on-demand model with `serve.prefetch: --prefetch`), and one JSON object: time to ready of
every start and of scale-from-zero starts (p50, p95), the share of warm starts, the bytes
downloaded (prefetches' included), and what stayed unplaced.

    .venv/bin/python -m bench.warm_starts [--nodes 8] [--step-s 60] [--seed 0] [--prefetch 1]

The fleet: nodes of 8 H100s, each with a model-cache volume (one run per size of
--volumes-gb; `catalog_weights_gb` is all the catalog's weights together). The catalog: two
steady chat models (the daytime curve of bench/trace_day.py) and on-demand models of four
sizes, each used in bursts at random times of the day (more by day), so each goes to zero
after its eviction grace and starts again from zero at its next burst. A pass every --step-s
seconds; stops take one pass (trace_day.stop_slowly). The day is replayed --warmup-days times
first, unmeasured, so that the measured day starts with the caches a fleet in use would have.

The simulated caches: a replica that starts on a node that lacks its weights downloads them,
and the node keeps them; the volume is kept within its size by evicting the snapshots used
least recently that no replica there runs (an LRU cleaner), so a node reports as free what the
cleaner could free: its volume less the weights its running replicas use. A start's time to
ready follows the stand-in model server's (llm_scheduler_standins WeightsTiming): a download at
--download-gbps then a load at --load-gbps (GB/s), on a warm node the load only, plus
--overhead-s of server start either way. Off, the caches fill and are used all the same (a
replica that lands on a node holding its weights starts warm); the scheduler just does not
aim for them. A prefetch job the plan starts downloads into its node's cache at
--download-gbps and keeps its weights by the same rule when done (bench/warm_prefetch.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.trace_day import H100, T0, load_at, stop_slowly
from bench.warm_prefetch import Prefetching
from llm_scheduler_standins.model_cache import WeightsTiming
from scheduler.core.decide import decide
from scheduler.core.fleet import CachedSnapshot, NodeCache
from scheduler.core.models import Snapshot, StartAction

GB = 10**9
VOLUME = "llm-model-cache"
# On-demand sizes: (name, GPUs, weights in GB), one model of each per round of the catalog.
SIZES = (("8b", 1, 16), ("14b", 1, 28), ("34b", 2, 68), ("70b", 4, 140))
STEADY = (("chat-70b", "critical", 4, 140, 1, 6, 24), ("chat-8b", "standard", 1, 16, 1, 12, 36))


def _model(
    name: str, cls: str, gpus: int, weights_gb: float, prefetch: int = 0, **scaling: Any
) -> dict[str, Any]:
    profile = {"name": "p", "gpus": gpus, "cpu_cores": 8 * gpus, "memory_gb": 64 * gpus}
    serve = {"source": f"org/{name}", "weights_gb": weights_gb}
    return {
        "name": name,
        "owner": "org/day",
        "class": cls,
        "serve": serve | ({"prefetch": prefetch} if prefetch else {}),
        "scaling": scaling,
        "profiles": [profile],
    }


def catalog(n_on_demand: int, prefetch: int = 0) -> list[dict[str, Any]]:
    """The steady models and `n_on_demand` on-demand ones, those with `serve.prefetch`."""
    models = [
        _model(n, c, g, w, min=lo, max=hi, target_per_replica=t) for n, c, g, w, lo, hi, t in STEADY
    ]
    for i in range(n_on_demand):
        size, gpus, weights = SIZES[i % len(SIZES)]
        name = f"od-{size}-{i // len(SIZES)}"
        models.append(
            _model(
                name,
                "standard",
                gpus,
                weights,
                prefetch,
                min=0,
                max=2,
                target_per_replica=8,
                on_demand=True,
            )
        )
    return models


def bursts(models: list[str], rng: random.Random) -> dict[str, list[tuple[int, int, int]]]:
    """Per on-demand model: (start s, end s, requests in flight), about one burst every two
    to three hours by day and every six at night, of 10-40 minutes."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name in models:
        t, spans = rng.uniform(0, 3600), []
        while t < 86400:
            hour = t / 3600
            day = max(math.sin((hour - 6) / 24 * 2 * math.pi), 0.0)
            length = rng.randint(10, 40) * 60
            spans.append((int(t), int(t) + length, rng.choice((4, 8, 12))))
            t += length + rng.expovariate(1 / (3600 * (6 - 4 * day)))
        out[name] = spans
    return out


@dataclass
class NodeVolume:
    """One node's simulated cache: weights by source, with their last use."""

    size: int
    held: dict[str, tuple[int, datetime]] = field(default_factory=dict)

    def keep(self, source: str, size: int, now: datetime, in_use: set[str]) -> bool:
        """Download `source` here, evicting least recently used snapshots not in use;
        False when even that leaves too little room (the download fails, nothing kept)."""
        for victim, _ in sorted(
            ((s, used) for s, (_, used) in self.held.items() if s not in in_use),
            key=lambda kv: kv[1],
        ):
            if sum(b for b, _ in self.held.values()) + size <= self.size:
                break
            del self.held[victim]
        if sum(b for b, _ in self.held.values()) + size > self.size:
            return False
        self.held[source] = (size, now)
        return True

    def report(self, in_use: set[str]) -> NodeCache:
        """What the reporter says: every snapshot held, and as free what an LRU cleaner
        could free (the volume less what running replicas use)."""
        busy = sum(b for s, (b, _) in self.held.items() if s in in_use)
        snaps = [
            CachedSnapshot(
                source=s,
                commit=hashlib.sha1(s.encode()).hexdigest(),
                revisions=["main"],
                bytes=b,
                weights_bytes=b,
                last_used=used,
            )
            for s, (b, used) in sorted(self.held.items())
        ]
        return NodeCache(volume=VOLUME, free_bytes=max(self.size - busy, 0), snapshots=snaps)


@dataclass
class Start:
    model: str
    seconds: float
    warm: bool
    from_zero: bool


@dataclass
class Run:
    """One replay's state: the caches, the replicas' ready times, what was measured."""

    volumes: dict[str, NodeVolume]
    weights: dict[str, int]  # by source
    timing: WeightsTiming
    overhead_s: float
    ready_at: dict[str, datetime] = field(default_factory=dict)  # starting replica -> when
    starts: list[Start] = field(default_factory=list)
    downloaded: int = 0
    failed_downloads: int = 0
    unplaced_steps: int = 0  # replicas wanted but not live, summed over the passes

    def measure(self) -> None:
        self.starts, self.downloaded, self.failed_downloads, self.unplaced_steps = [], 0, 0, 0

    def keep(self, node: str, source: str, size: int, now: datetime, in_use: set[str]) -> bool:
        return self.volumes[node].keep(source, size, now, in_use)

    def in_use(self, snap: Snapshot) -> dict[str, set[str]]:
        source = {m.name: m.serve.source for m in snap.models if m.serve is not None}
        used: dict[str, set[str]] = {n: set() for n in self.volumes}
        for r in snap.replicas:
            for sh in r.shards:
                used[sh.node].add(source[r.model])
        return used

    def nodes(self, snap: Snapshot, aware: bool) -> list[Any]:
        used = self.in_use(snap)
        return [
            n.model_copy(update={"cache": self.volumes[n.id].report(used[n.id]) if aware else None})
            for n in snap.nodes
        ]

    def started(self, snap: Snapshot, a: StartAction, from_zero: bool) -> None:
        """A replica started at snap.now: warm or cold on its node, its time to ready, and
        the node's cache filled."""
        source = f"org/{a.model}"
        size = self.weights[source]
        node = a.shards[0].node
        vol = self.volumes[node]
        warm = source in vol.held
        if warm:
            vol.held[source] = (size, snap.now)
        else:
            self.downloaded += size
            if not vol.keep(source, size, snap.now, self.in_use(snap)[node]):
                self.failed_downloads += 1
        seconds = self.overhead_s + self.timing.ready_after_s(size, warm)
        self.ready_at[a.replica] = snap.now + timedelta(seconds=seconds)
        self.starts.append(Start(a.model, seconds, warm, from_zero))


def fleet(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"n{i}",
            "name": f"gpu-{i}",
            "cpu_cores": 128,
            "memory_gb": 1024,
            "host_volumes": [VOLUME],
            "gpus": [{"id": f"n{i}-g{j}", "model": H100, "memory_gb": 80} for j in range(8)],
        }
        for i in range(n)
    ]


def demand_at(
    t: int, now: datetime, spans: dict[str, list[tuple[int, int, int]]], rng: random.Random
) -> dict[str, dict[str, Any]]:
    loads = {name: load_at(name, t, rng) for name, *_ in STEADY}
    for name, bursts_of in spans.items():
        loads[name] = next((load for a, b, load in bursts_of if a <= t < b), 0)
    return {
        name: {"inflight": load, **({"last_used": now.isoformat()} if load else {})}
        for name, load in loads.items()
    }


def _ready(snap: Snapshot, run: Run) -> Snapshot:
    """Replicas started by the last plan are starting until their time to ready has passed."""
    out = []
    for r in snap.replicas:
        when = run.ready_at.get(r.id)
        if when is not None:
            if when > snap.now:
                r = r.model_copy(update={"state": "starting", "ready_at": None})
            else:
                r = r.model_copy(update={"state": "running", "ready_at": when})
                del run.ready_at[r.id]
        out.append(r)
    return snap.model_copy(update={"replicas": out})


# The sides of a run: what the scheduler sees of the caches, and whether it prefetches.
MODES = ("off", "placement", "placement_prefetch")


def replay(mode: str, volume_gb: float, args: argparse.Namespace) -> dict[str, Any]:
    aware, prefetching = mode != "off", mode == "placement_prefetch"
    models = catalog(args.on_demand, args.prefetch if prefetching else 0)
    spans = bursts(
        [m["name"] for m in models if m["scaling"].get("on_demand")], random.Random(args.seed)
    )
    rng = random.Random(args.seed + 1)
    snap = Snapshot.model_validate(
        {
            "now": T0.isoformat(),
            "nodes": fleet(args.nodes),
            "models": models,
            # The scheduler's expected download and load rates (Gbit/s) are the simulated ones.
            "settings": {"download_gbps": args.download_gbps * 8, "load_gbps": args.load_gbps * 8},
        }
    )
    run = Run(
        volumes={n.id: NodeVolume(int(volume_gb * GB)) for n in snap.nodes},
        weights={f"org/{m['name']}": int(m["serve"]["weights_gb"] * GB) for m in models},
        timing=WeightsTiming(download_gbps=args.download_gbps, load_gbps=args.load_gbps),
        overhead_s=args.overhead_s,
    )
    jobs = Prefetching(run.weights, args.download_gbps * GB)
    steps = 86400 // args.step_s
    for k in range(steps * (1 + args.warmup_days)):
        if k == steps * args.warmup_days:  # the day measured starts here, caches as they are
            run.measure()
            jobs.measure()
        t = (k % steps) * args.step_s
        now = T0 + timedelta(seconds=k * args.step_s)
        demand = Snapshot.model_validate(
            {"now": now.isoformat(), "demand": demand_at(t, now, spans, rng)}
        ).demand
        snap = _ready(snap, run)
        jobs.finish(now, run.keep, run.in_use(snap))
        update = {"demand": demand, "nodes": run.nodes(snap, aware), "prefetches": jobs.records()}
        snap = snap.model_copy(update=update)
        plan = decide(snap)
        jobs.apply(plan.prefetches, now, k)
        live: dict[str, int] = {}
        for r in snap.replicas:
            if r.counts:
                live[r.model] = live.get(r.model, 0) + 1
        for a in plan.actions:
            if isinstance(a, StartAction):
                run.started(snap, a, live.get(a.model, 0) == 0)
        run.unplaced_steps += sum(max(s.desired - s.live, 0) for s in plan.models.values())
        snap = stop_slowly(snap, plan, args.step_s)
    out = summary(run, args.step_s)
    out["downloaded_gb"] = round((run.downloaded + jobs.downloaded) / GB, 1)
    prefetched = {"jobs": jobs.started, "gb": round(jobs.downloaded / GB, 1)}
    return out | {"prefetched": prefetched | {"failed_for_room": jobs.failed}}


def _pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(math.ceil(q * len(ordered)) - 1, 0)], 1)


def summary(run: Run, step_s: int) -> dict[str, Any]:
    def of(starts: list[Start]) -> dict[str, Any]:
        secs = [s.seconds for s in starts]
        return {
            "starts": len(starts),
            "p50_s": _pct(secs, 0.5),
            "p95_s": _pct(secs, 0.95),
            "warm_share": round(sum(s.warm for s in starts) / len(starts), 3) if starts else None,
        }

    return {
        "all_starts": of(run.starts),
        "from_zero": of([s for s in run.starts if s.from_zero]),
        "downloaded_gb": round(run.downloaded / GB, 1),
        "failed_downloads": run.failed_downloads,
        "unplaced_replica_minutes": run.unplaced_steps * step_s // 60,
    }


def _ratio(off: float | None, on: float | None) -> float | None:
    return round(off / on, 2) if off and on else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--on-demand", type=int, default=12, help="on-demand models")
    parser.add_argument(
        "--volumes-gb", default="300,450,600", help="each node's cache volume, one run each"
    )
    parser.add_argument("--download-gbps", type=float, default=1.0, help="GB/s")
    parser.add_argument("--load-gbps", type=float, default=5.0, help="GB/s")
    parser.add_argument("--overhead-s", type=float, default=20.0)
    parser.add_argument("--step-s", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-days", type=int, default=1, help="replayed before measuring")
    parser.add_argument(
        "--prefetch", type=int, default=1, help="serve.prefetch of each on-demand model (3rd side)"
    )
    args = parser.parse_args(argv)
    runs = []
    for volume_gb in (float(v) for v in args.volumes_gb.split(",")):
        sides = {mode: replay(mode, volume_gb, args) for mode in MODES}
        off = sides["off"]
        ratios = {
            mode: {
                k: {
                    "p50": _ratio(off[k]["p50_s"], on[k]["p50_s"]),
                    "p95": _ratio(off[k]["p95_s"], on[k]["p95_s"]),
                }
                for k in ("all_starts", "from_zero")
            }
            for mode, on in sides.items()
            if mode != "off"
        }
        runs.append({"volume_gb": volume_gb, **sides, "off_over": ratios})
    weights = sum(m["serve"]["weights_gb"] for m in catalog(args.on_demand))
    out = {"bench": "warm_starts", **vars(args), "catalog_weights_gb": weights, "runs": runs}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
