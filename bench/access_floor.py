"""What reading a larger fleet costs per node on this machine, whatever the pass does; one JSON
object.

    .venv/bin/python -m bench.access_floor [--sizes 1000,4000,10000] [--seed 0] [--rounds 5]

The pass's time should grow with the cluster's size at a log-log slope of at most 1.1.
bench/pass_instructions.py shows the pass's work is linear in instructions; its time grows
faster. This bench measures, on the same steady snapshots as bench/pass_time.py
and in the same run as the pass itself, reads that do a fixed amount of work per node: four
that any pass over the snapshot does in some form, and one that a compact snapshot would do
instead:

- `walk`: every node, GPU, MIG slice, replica and shard read once, in the snapshot's order;
- `node_join`: each shard's node looked up by id in a dict of the nodes (placing what a
  replica holds on its node);
- `device_join`: each device a shard holds looked up in the set of all devices held (is a GPU
  taken?);
- `replica_index`: every replica put in a dict by id;
- `indexed_join`: what `node_join` would be on a compact snapshot, one whose shards carry their
  node's position (worked out before the timing, as an adapter would): a float per node in a
  list, added to at each shard's position. No lookup by id, and no object per node.

Each is timed as a median over `rounds`, with the cyclic collector off (as the service runs a
pass), and reported in ns per node with its log-log slope over the sizes, next to the pass's.
The work per node does not change with the size (the counts are printed), so a slope above 1
is what the machine adds: memory that the larger fleet no longer fits in the caches. A join's
slope is the floor under any pass that puts replicas on their nodes by id; `indexed_join`'s,
what a compact snapshot would have instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import describe, steady_snapshot
from bench.interpreter import describe as describe_interpreter
from bench.pass_time import core_build_name, load_decide, log_slope
from scheduler.core.models import Snapshot


def walk(snap: Snapshot) -> tuple[int, int]:
    """Every node, GPU, slice, replica and shard read once: (objects read, devices held)."""
    objects = devices = 0
    for node in snap.nodes:
        objects += 1
        for gpu in node.gpus:
            objects += 1 + len(gpu.mig or ())
    for rep in snap.replicas:
        objects += 1
        for shard in rep.shards:
            objects += 1
            devices += len(shard.gpus)
    return objects, devices


def node_join(snap: Snapshot, nodes: dict[str, int]) -> int:
    """Each shard's node by id; returns how many shards were on a known node."""
    found = 0
    for rep in snap.replicas:
        for shard in rep.shards:
            found += nodes.get(shard.node, 0)
    return found


def device_join(snap: Snapshot, held: set[str]) -> int:
    """Each shard's devices in the set of held devices; returns how many were found."""
    found = 0
    for rep in snap.replicas:
        for shard in rep.shards:
            for dev in shard.gpus:
                if dev in held:
                    found += 1
    return found


def indexed_join(positions: list[int], n_nodes: int) -> int:
    """Per shard, its node's position (-1: unknown) into a list of per-node floats; returns how
    many shards were on a known node."""
    held = [0.0] * n_nodes
    for i in positions:
        if i >= 0:
            held[i] += 1.0
    return round(sum(held))


def replica_index(snap: Snapshot) -> int:
    by_id = {}
    for rep in snap.replicas:
        by_id[rep.id] = rep
    return len(by_id)


def median_s(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm
    walls = []
    for _ in range(rounds):
        w0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls)


def measure(n_nodes: int, seed: int, rounds: int) -> dict[str, Any]:
    decide = load_decide()
    snap = steady_snapshot(n_nodes, seed=seed)
    nodes = {node.id: 1 for node in snap.nodes}
    held = {dev for rep in snap.replicas for shard in rep.shards for dev in shard.gpus}
    where = {node.id: i for i, node in enumerate(snap.nodes)}
    positions = [where.get(shard.node, -1) for rep in snap.replicas for shard in rep.shards]
    reads: dict[str, Callable[[], object]] = {
        "walk": lambda: walk(snap),
        "node_join": lambda: node_join(snap, nodes),
        "device_join": lambda: device_join(snap, held),
        "replica_index": lambda: replica_index(snap),
        "indexed_join": lambda: indexed_join(positions, n_nodes),
        "pass": lambda: decide(snap),
    }
    gc.collect()
    gc.disable()
    try:
        # Few rounds of the pass at large sizes: a read is cheap next to it.
        times = {k: median_s(f, rounds if k == "pass" else 4 * rounds) for k, f in reads.items()}
    finally:
        gc.enable()
    return {
        "nodes": n_nodes,
        "snapshot": describe(snap),
        "counts": {
            "walk_objects_and_devices": walk(snap),
            "shards_on_known_nodes": node_join(snap, nodes),
            "shards_on_known_nodes_indexed": indexed_join(positions, n_nodes),
            "devices_found": device_join(snap, held),
            "replicas_indexed": replica_index(snap),
        },
        "ns_per_node": {k: round(v / n_nodes * 1e9, 1) for k, v in times.items()},
    }


def run(sizes: list[int], seed: int, rounds: int) -> dict[str, Any]:
    results = [measure(n, seed, rounds) for n in sizes]
    xs = [float(r["nodes"]) for r in results]
    slopes = {
        k: log_slope(xs, [r["ns_per_node"][k] * r["nodes"] for r in results])
        for k in results[0]["ns_per_node"]
    }
    return {
        "bench": "access_floor",
        "core": core_build_name(),
        "interpreter": describe_interpreter(),
        "seed": seed,
        "rounds": rounds,
        "results": results,
        "slope_in_size": slopes,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,4000,10000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(json.dumps(run(sizes, args.seed, args.rounds), indent=2))


if __name__ == "__main__":
    main()
