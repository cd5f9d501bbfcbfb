"""Instructions one decision pass executes, counted by valgrind, at several sizes; one JSON object.

    .venv/bin/python -m bench.pass_instructions [--sizes 1000,4000] [--seed 0]

Time on a shared machine drifts by more than most changes (the same code at 10,000 nodes
measured 630 to 730 ms in one day here). An instruction count does not: the same code and
snapshot give the same count, to about 0.01%, whatever else the machine does. It measures the
work a pass does, not how the memory serves it, so the two slopes tell apart what the code
does and what the machine does with it: the log-log slope of instructions against the
cluster's size (nodes, with the models grown alike: bench/fleetgen.py's steady snapshot) is
the pass's own growth; bench/pass_time.py's slope of times, above it, is what caches and
memory add on a larger fleet.

For each size, two processes run under `valgrind --tool=callgrind` side by side: each builds
the snapshot and runs decide() once, or twice, with the cyclic collector off (as the service
runs a pass); the difference is one warm pass (the interpreter's start, the imports and the
snapshot's construction cancel out). The hash seed is fixed; what still moves a count (by
about 0.01%) is where objects land in memory. About 1 minute at 1,000 nodes, 2 at 4,000, 5 at
10,000 (valgrind runs Python some 50 times slower).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.interpreter import describe as describe_interpreter
from bench.pass_time import log_slope

HERE = Path(__file__).resolve().parent.parent

# The collector is off for the passes, as the service pauses it for a pass
# (scheduler/service/collector.py): its sweeps would be counted otherwise, and a full one walks
# the whole snapshot. A pass leaves nothing in cycles (tests/core/test_pass_garbage.py).
CHILD = r"""
import gc, sys
import scheduler
from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
nodes, seed, passes, caches = (int(a) for a in sys.argv[1:5])
snap = steady_snapshot(nodes, seed=seed, caches=bool(caches))
gc.collect()
gc.disable()
for _ in range(passes):
    decide(snap)
print(scheduler.CORE_BUILD)
"""

_COLLECTED = re.compile(r"==\d+== Collected : (\d+)")


def collected(stderr: str) -> int:
    """The instruction count callgrind prints at exit (`==pid== Collected : N`)."""
    found = _COLLECTED.findall(stderr)
    if not found:
        raise RuntimeError(f"no instruction count in valgrind's output: {stderr[-500:]}")
    return int(found[-1])


def count(nodes: int, seed: int, passes: int, core_build: str, caches: bool = False) -> int:
    """Instructions of a process that builds the snapshot and runs `passes` passes with the
    core `core_build` (a child that found another, an install rebuilt meanwhile say, would
    make the difference of two counts meaningless)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                "-c",
                CHILD,
                str(nodes),
                str(seed),
                str(passes),
                str(int(caches)),
            ],
            cwd=HERE,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the pass under valgrind failed: {done.stderr[-1000:]}")
    if done.stdout.strip() != core_build:
        raise RuntimeError(f"a child ran the {done.stdout.strip()!r} core, not {core_build!r}")
    return collected(done.stderr)


def one_pass(nodes: int, seed: int, core_build: str, caches: bool = False) -> int:
    """Instructions of one warm pass: two processes' counts, one pass apart."""
    with ThreadPoolExecutor(2) as pool:
        once, twice = pool.map(lambda n: count(nodes, seed, n, core_build, caches), (1, 2))
    return twice - once


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,4000", help="node counts, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--caches", action="store_true", help="every node reports a model cache (fleetgen)"
    )
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    import scheduler

    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        instructions = one_pass(n, args.seed, scheduler.CORE_BUILD, args.caches)
        rows.append({"nodes": n, "instructions": instructions, "per_node": round(instructions / n)})
    out = {
        "bench": "pass_instructions",
        "measure": "instructions of one warm decide() pass (valgrind callgrind), collector "
        "off: two processes' counts, one pass apart, hash seed fixed",
        "interpreter": describe_interpreter(),
        "core_build": f"{scheduler.CORE_BUILD} ({scheduler.CORE_BUILD_WHY})",
        "seed": args.seed,
        "caches": args.caches,
        "sizes": rows,
        "slope_vs_cluster_size": log_slope(
            [float(r["nodes"]) for r in rows], [float(r["instructions"]) for r in rows]
        ),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
