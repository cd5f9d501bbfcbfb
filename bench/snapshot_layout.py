"""The pass on bench/fleetgen.py's snapshot and on the same snapshot read back from JSON; one
JSON object.

    .venv/bin/python -m bench.snapshot_layout [--sizes 1000,4000,10000] [--rounds 8] [--seed 0]

bench/pass_time.py times the pass on the snapshot fleetgen builds in memory, where many objects
are shared: a shard's node id is the node's own id object, its device ids the GPUs' own, a GPU
model's name or an owner one object for the whole fleet, and models made from one template
share their Profile objects. A snapshot the adapters build from Nomad's and Consul's JSON
shares less: each node, allocation and model document has strings of its own. This bench
measures what that costs the pass, side by side: at each size the steady snapshot is written
to JSON and read back twice through json.loads and Snapshot validation, `read` as json.loads
made it and `read_interned` with what the adapters intern interned
(scheduler/adapters/interning.py: node, GPU and slice ids, GPU model names, pools and
datacenters, held devices, each shard's node and devices, each replica's model and profile,
each model's name, owner, class and profile names, MIG profiles and GPU models, each quota's
owner). The three passes run interleaved, with the cyclic collector off, and must give the
same plan. Ratios are to `generated`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import steady_snapshot
from bench.interpreter import describe as describe_interpreter
from bench.pass_time import core_build_name, load_decide
from scheduler.adapters.interning import intern, intern_fields, intern_model
from scheduler.core.models import Snapshot


def intern_ids(doc: dict[str, Any]) -> dict[str, Any]:
    """The snapshot document with what the adapters intern made one object each
    (scheduler/adapters/interning.py and its callers)."""
    for node in doc["nodes"]:
        intern_fields(node, "id", "pool", "datacenter")
        node["held"] = [intern(d) for d in node["held"]]
        for gpu in node["gpus"]:
            intern_fields(gpu, "id", "model")
            for s in gpu["mig"] or ():
                intern_fields(s, "id", "profile")
    for model in doc["models"]:
        intern_model(model)
    for quota in doc["quotas"]:
        intern_fields(quota, "owner")
    for rep in doc["replicas"]:
        intern_fields(rep, "model", "profile")
        for shard in rep["shards"]:
            intern_fields(shard, "node")
            shard["gpus"] = [intern(d) for d in shard["gpus"]]
    return doc


def measure(n_nodes: int, seed: int, rounds: int) -> dict[str, Any]:
    decide = load_decide()
    generated = steady_snapshot(n_nodes, seed=seed)
    text = generated.model_dump_json(by_alias=True)
    snaps = {
        "generated": generated,
        "read": Snapshot.model_validate(json.loads(text)),
        "read_interned": Snapshot.model_validate(intern_ids(json.loads(text))),
    }
    plans = {k: decide(s).model_dump_json() for k, s in snaps.items()}
    if len(set(plans.values())) != 1:
        raise AssertionError(f"{n_nodes} nodes: a snapshot read back gave another plan")
    walls: dict[str, list[float]] = {k: [] for k in snaps}
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for k, snap in snaps.items():
                w0 = time.perf_counter()
                decide(snap)
                walls[k].append(time.perf_counter() - w0)
    finally:
        gc.enable()
    ms = {k: round(statistics.median(v) * 1000, 2) for k, v in walls.items()}
    return {
        "nodes": n_nodes,
        "median_ms": ms,
        "ratio_to_generated": {
            k: round(v / ms["generated"], 3) for k, v in ms.items() if k != "generated"
        },
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,4000,10000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    out = {
        "bench": "snapshot_layout",
        "core": core_build_name(),
        "interpreter": describe_interpreter(),
        "seed": args.seed,
        "rounds": args.rounds,
        "results": [measure(int(n), args.seed, args.rounds) for n in args.sizes.split(",")],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
