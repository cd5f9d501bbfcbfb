"""cProfile one decide() pass on a steady-state fleet and print the top functions.

.venv/bin/python -m bench.profile_pass [--nodes 1000] [--top 25] [--sort tottime]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import steady_snapshot
from bench.pass_time import load_decide


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime", choices=("tottime", "cumulative", "ncalls"))
    args = parser.parse_args(argv)
    decide = load_decide()
    snapshot = steady_snapshot(args.nodes, seed=args.seed)
    decide(snapshot)  # warm-up
    profiler = cProfile.Profile()
    profiler.enable()
    decide(snapshot)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats(args.sort).print_stats(args.top)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
