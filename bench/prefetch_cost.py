"""What the prefetch step (rules PF1-PF3, scheduler/core/prefetch.py) costs against the pass it
ends, side by side in one process; one JSON object.

    .venv/bin/python -m bench.prefetch_cost [--nodes 1000] [--repeat 5]

Three snapshots of fleetgen's steady fleet: as generated (no model prefetches: the step's cost
is its look at the models), every node with a model cache and every other model at
`serve.prefetch: 1`, and every model at 2 with 64 slots (`prefetch_max`) and caches too small
for its weights (every model walks its candidates to the end). Each time is the best of
`--repeat` runs with the cyclic collector off, as the service runs a pass.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.fleet import NodeCache
from scheduler.core.models import Snapshot
from scheduler.core.pass_state import PassState
from scheduler.core.plugins import Plugins
from scheduler.core.prefetch import prefetch
from scheduler.core.serve_spec import Serve

GB = 10**9


def _best(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def _prefetching(snap: Snapshot, every: int, count: int, free: int, slots: int) -> Snapshot:
    """Every `every`-th model at serve.prefetch `count` (100 GB of weights), every node with a
    cache of `free` bytes (every tenth one saying nothing), `slots` prefetches at once."""
    models = [
        m.model_copy(
            update={"serve": Serve(source=f"org/{m.name}", prefetch=count, weights_gb=100)}
        )
        if i % every == 0
        else m
        for i, m in enumerate(snap.models)
    ]
    nodes = [
        n.model_copy(update={"cache": NodeCache(volume="v", free_bytes=free if i % 10 else None)})
        for i, n in enumerate(snap.nodes)
    ]
    settings = snap.settings.model_copy(update={"prefetch_max": slots})
    return snap.model_copy(update={"models": models, "nodes": nodes, "settings": settings})


def measure(nodes: int, repeat: int) -> dict[str, Any]:
    base = steady_snapshot(nodes)
    cases = {
        "none": base,
        "half_at_1": _prefetching(base, 2, 1, 1000 * GB, 2),
        "all_at_2_caches_full": _prefetching(base, 1, 2, GB, 64),
    }
    out: dict[str, Any] = {"nodes": nodes, "models": len(base.models)}
    gc.disable()
    try:
        for name, snap in cases.items():
            pass_s = _best(lambda s=snap: decide(s), repeat)
            st = PassState(snap, Plugins())
            step_s = _best(lambda st=st: prefetch(st), repeat)
            out[name] = {
                "pass_ms": round(pass_s * 1e3, 2),
                "prefetch_ms": round(step_s * 1e3, 4),
                "share_pct": round(step_s / pass_s * 100, 3),
                "starts": sum(
                    1 for a in prefetch(PassState(snap, Plugins()))[0] if a.op == "start"
                ),
            }
    finally:
        gc.enable()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes, args.repeat)))


if __name__ == "__main__":
    main()
