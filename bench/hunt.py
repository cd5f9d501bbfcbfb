"""A seeded hunt for preemption cycles: generated scenarios run pass after pass with demand
and capacity unchanged, each watched by the convergence oracles (tests/core/convergence.py);
one JSON object.

    .venv/bin/python -m bench.hunt [--scenarios 10000] [--passes 30] [--seed 0] [--jobs 1]
        [--against REV]

Seed `s` draws one scenario (even seeds from scenario_gen, odd ones crowded: three or four
models on one or two small nodes), builds its history with the core, then fixes settings
and demand and runs at least `--passes` passes (on until quiet, 60 more at most), checking
every plan against the rules. Counted per side: runs that never go quiet, cycles of any
length (a state and its changes met again), turn-taking, a model preempted twice for the
same model within its hold, runs past the stated bound of passes with changes, and plans
breaking a rule; with the first seeds of each.

`--against` (a revision, or a checkout's root) runs the same scenarios and oracles with that
checkout's core (pure Python) beside this one's: before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.revision import commit_of, tree_of

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 10  # seeds kept per kind of finding

# One worker: the seeds it is given, with the core found first on its path (CORE).
WORKER = r"""
import json, sys, time
from collections import Counter
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from convergence import ORACLE, hunt
import scheduler
first, count, passes = json.loads(sys.argv[1])
kinds, oracle, changed, examples = Counter(), Counter(), Counter(), {}
runs = passes_run = 0
most = [-1, None]
ratio = 0.0
t = time.perf_counter()
for seed in range(first, first + count):
    watch = hunt(seed, passes)
    if watch is None:
        continue
    runs += 1
    passes_run += watch.passes
    changed[len(watch.changed)] += 1
    if watch.settled():  # how much of its bound a run that went quiet took
        ratio = max(ratio, len(watch.changed) / watch.limit)
    if len(watch.changed) > most[0]:
        most = [len(watch.changed), seed]
    for kind in sorted({f.kind for f in watch.findings}):
        kinds[kind] += 1
        examples.setdefault(kind, []).append(seed)
    for f in watch.findings:
        if f.kind == ORACLE:
            oracle[f.detail[:100]] += 1
print(json.dumps({
    "runs": runs, "passes_run": passes_run, "seconds": time.perf_counter() - t,
    "kinds": dict(kinds), "oracle": dict(oracle), "changed": dict(changed),
    "examples": examples, "most": most, "ratio": round(ratio, 3),
    "core_build": getattr(scheduler, "CORE_BUILD", "pure"),
}))
"""


def _spawn(tree: Path, first: int, count: int, passes: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if tree != ROOT:
        env["LLM_SCHEDULER_PURE_PYTHON"] = "1"
    args = [json.dumps([first, count, passes]), str(tree), str(ROOT / "tests" / "core")]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _side(tree: Path, seed: int, scenarios: int, passes: int, jobs: int) -> dict[str, Any]:
    """The hunt's seeds split over `jobs` workers running this tree's core."""
    started = time.perf_counter()
    share = -(-scenarios // jobs)
    workers = [
        _spawn(tree, seed + i, min(share, scenarios - i), passes)
        for i in range(0, scenarios, share)
    ]
    parts = []
    for w in workers:
        out, err = w.communicate()
        if w.returncode != 0:
            raise SystemExit(f"{tree}: a hunt worker failed:\n{err[-3000:]}")
        parts.append(json.loads(out.strip().splitlines()[-1]))
    return _merge(parts, time.perf_counter() - started)


def _merge(parts: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    oracle: Counter[str] = Counter()
    changed: Counter[int] = Counter()
    examples: dict[str, list[int]] = {}
    for p in parts:
        kinds.update(p["kinds"])
        oracle.update(p["oracle"])
        changed.update({int(k): v for k, v in p["changed"].items()})
        for kind, seeds in p["examples"].items():
            examples.setdefault(kind, []).extend(seeds)
    runs = sum(p["runs"] for p in parts)
    most: list[Any] = max((p["most"] for p in parts), key=lambda m: int(m[0]))
    passes_run = sum(p["passes_run"] for p in parts)
    from convergence import KINDS  # this checkout's oracle, on the path by now

    return {
        "core_build": parts[0]["core_build"] if parts else None,
        "runs": runs,
        "passes_run": passes_run,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(sum(p["seconds"] for p in parts), 1),
        "runs_per_cpu_s": round(runs / max(sum(p["seconds"] for p in parts), 1e-9), 2),
        "found": {k: kinds.get(k, 0) for k in KINDS},
        "most_of_bound": max((p["ratio"] for p in parts), default=0.0),
        "most_passes_with_changes": {"passes": most[0], "seed": most[1]},
        "passes_with_changes": {str(k): changed[k] for k in sorted(changed)},
        "oracle": dict(oracle.most_common()),
        "examples": {k: sorted(v)[:EXAMPLES] for k, v in sorted(examples.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=10000)
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes per side")
    parser.add_argument("--against", help="a revision, or another checkout's root")
    args = parser.parse_args(argv)
    if args.scenarios < 1 or args.passes < 1 or args.jobs < 1:
        parser.error("--scenarios, --passes and --jobs must be positive")
    sys.path.insert(0, str(ROOT / "tests" / "core"))
    out: dict[str, Any] = {
        "bench": "hunt",
        "scenarios": args.scenarios,
        "passes": args.passes,
        "seed": args.seed,
        "jobs": args.jobs,
        "this": {"commit": commit_of(ROOT)},
    }
    out["this"].update(_side(ROOT, args.seed, args.scenarios, args.passes, args.jobs))
    if args.against:
        with tree_of(args.against, ROOT) as tree:
            side = _side(tree, args.seed, args.scenarios, args.passes, args.jobs)
        out["against"] = {"revision": args.against, "commit": commit_of(ROOT, args.against)}
        out["against"].update(side)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
