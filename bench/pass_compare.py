"""This checkout's decision pass against another checkout's, side by side; one JSON object.

    .venv/bin/python -m bench.pass_compare --against /tmp/old [--sizes 1000,4000,10000]
        [--rounds 3] [--passes 5] [--seed 0]

`--against` is the root of another checkout of this repository (e.g. `git worktree add
/tmp/old <commit>`). For each round, one process per checkout runs, one after the other
(alternating, so a machine whose speed drifts, or a neighbour's load, touches both alike): it
builds bench/fleetgen.py's steady snapshot at each size with its own code, runs decide() once
to warm up, then `--passes` times with the cyclic collector paused (as the service runs a
pass), and reports the median CPU time of the pass (thread time: what the pass itself costs,
not what the machine's other work takes from it), and the same pass followed by the young
collection that frees whatever it left in reference cycles (`with_collect`: the service's loop
pays that once the collector is back on; an older pass left its whole working state so,
tests/core/test_pass_garbage.py). The result is the median over rounds per
checkout and size, and the ratio of this checkout to the other one. Only ratios measured in
one run mean anything: the same code measured hours apart on a shared machine differs by more
than most changes. Each checkout runs the core its install built (`core_build` in the output:
mypyc or pure); LLM_SCHEDULER_PURE_PYTHON=1 makes both run the pure-Python core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.interpreter import describe as describe_interpreter
from bench.revision import run_in

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, statistics, sys, time
from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
sizes, passes, seed = json.loads(sys.argv[1])
out = {}
for n in sizes:
    snap = steady_snapshot(n, seed=seed)
    decide(snap)
    cpu, with_collect = [], []
    for _ in range(passes):
        gc.collect()
        gc.disable()
        t = time.thread_time()
        decide(snap)
        cpu.append(time.thread_time() - t)
        gc.enable()
        gc.collect(0)  # what the pass left in cycles: the next young collection frees it
        with_collect.append(time.thread_time() - t)
    out[str(n)] = statistics.median(cpu) * 1000
    out[str(n) + "+collect"] = statistics.median(with_collect) * 1000
    del snap
import scheduler  # an older checkout has no compiled core
out["core_build"] = getattr(scheduler, "CORE_BUILD", "pure")
print(json.dumps(out))
"""


def _passed_on() -> list[str]:
    """This process's PYTHONPATH entries that are not a checkout (whose `scheduler` would
    shadow the other's), made absolute: the packages of the environment when this runs under
    an interpreter other than the venv's, e.g. `PYTHONPATH=.venv/lib/python3.11/site-packages
    /usr/bin/python3.11 -m bench.pass_compare ...` (bench/interpreter.py says why)."""
    kept = []
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        path = Path(entry).resolve()
        if not (path / "scheduler").is_dir():
            kept.append(str(path))
    return kept


def _one(
    tree: Path, sizes: list[int], passes: int, seed: int, passed_on: list[str]
) -> dict[str, Any]:
    # The checkout first, then what this process was given (_passed_on).
    env = {"PYTHONPATH": os.pathsep.join([str(tree), *passed_on])}
    result: dict[str, Any] = run_in(tree, CHILD, [sizes, passes, seed], env, "the pass failed")
    return result


def _git_head(tree: Path) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def compare(against: Path, sizes: list[int], rounds: int, passes: int, seed: int) -> dict[str, Any]:
    trees = {"this": HERE, "against": against}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    passed_on = _passed_on()
    for _ in range(rounds):
        for name, tree in trees.items():
            runs[name].append(_one(tree, sizes, passes, seed, passed_on))
    per_size = []
    for n in sizes:
        this = statistics.median(r[str(n)] for r in runs["this"])
        other = statistics.median(r[str(n)] for r in runs["against"])
        this_c = statistics.median(r[str(n) + "+collect"] for r in runs["this"])
        other_c = statistics.median(r[str(n) + "+collect"] for r in runs["against"])
        per_size.append(
            {
                "nodes": n,
                "this_cpu_median_ms": round(this, 1),
                "against_cpu_median_ms": round(other, 1),
                "ratio_this_to_against": round(this / other, 3) if other > 0 else None,
                "this_with_collect_ms": round(this_c, 1),
                "against_with_collect_ms": round(other_c, 1),
                "ratio_with_collect": round(this_c / other_c, 3) if other_c > 0 else None,
            }
        )
    return {
        "bench": "pass_compare",
        "this": {
            "path": str(HERE),
            "commit": _git_head(HERE),
            "core_build": runs["this"][0]["core_build"],
        },
        "against": {
            "path": str(against),
            "commit": _git_head(against),
            "core_build": runs["against"][0]["core_build"],
        },
        "interpreter": describe_interpreter(),  # both checkouts run under it
        "rounds": rounds,
        "passes_per_round": passes,
        "seed": seed,
        "measure": "median CPU (thread) time of one decide() pass, collector paused, "
        "alternating processes; `with_collect`: the pass and then the young collection that "
        "frees what it left in reference cycles (the service's loop pays it after the pass)",
        "sizes": per_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, type=Path, help="another checkout's root")
    parser.add_argument("--sizes", default="1000,4000,10000", help="node counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.rounds < 1 or args.passes < 1:
        parser.error("--sizes, --rounds and --passes must be positive")
    if not (args.against / "scheduler" / "core" / "decide.py").is_file():
        parser.error(f"--against {args.against} is not a checkout of this repository")
    print(json.dumps(compare(args.against.resolve(), sizes, args.rounds, args.passes, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
