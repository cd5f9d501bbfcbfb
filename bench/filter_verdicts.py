"""One pass with an extra static filter, undeclared and declared, and without one.

    .venv/bin/python -m bench.filter_verdicts [--sizes 1000,4000] [--runs 1]

The filter (`ZoneRule`) reads a node's zone (from its id) and the profile's GPU count. Undeclared,
the core asks it once per (model, profile) and node; declared (`shape_key`, `profile_fields`),
once per profile key and node shape and zone. Prints, per size, the median CPU time of a pass
and how many times the filter ran, and whether both versions gave the same plan.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.inventory import NodeState
from scheduler.core.models import Node
from scheduler.core.plugins import Choice, PlaceContext, Plugins


def zone_of(node: Node) -> int:
    """A node's zone, from its id (every fleet has ids): three zones of mixed hardware."""
    return zlib.crc32(node.id.encode()) % 3


class ZoneRule:
    """A static extra filter that reads a node's zone and the profile's GPU count: zone 0
    takes nothing over 2 GPUs a shard, zone 1 only GPUs of 80 GB or more (a narrowing).
    Also the tests' (tests/core/test_plugin_paths.py)."""

    name = "zone-rule"
    static = True

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        self.calls += 1
        zone = zone_of(node.node)
        if zone == 0 and ctx.profile.gpus > 2:
            return "zone 0 takes at most 2 GPUs a shard"
        if zone == 1 and not ctx.profile.is_mig:
            choice.gpus = [g for g in choice.gpus if g.memory_gb >= 80]
            if not choice.gpus:
                return "zone 1 lends only GPUs of 80 GB"
        return None


class DeclaredZoneRule(ZoneRule):
    """The same filter, saying what it reads: alike nodes of one zone share its verdict."""

    profile_fields: tuple[str, ...] | None = ("gpus", "mig_profile")

    def shape_key(self, node: Node) -> Hashable:
        return zone_of(node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000", help="node counts, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="timed passes per variant")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for n in (int(s) for s in args.sizes.split(",")):
        snap = steady_snapshot(n, seed=0)
        row: dict[str, Any] = {"nodes": n}
        plans: dict[str, str] = {}
        for label, make in (
            ("none", None),
            ("undeclared", ZoneRule),
            ("declared", DeclaredZoneRule),
        ):
            times, runs = [], 0
            for _ in range(args.runs):
                f = make() if make is not None else None
                gc.collect()
                gc.disable()  # as the service runs a pass (scheduler/service/collector.py)
                start = time.process_time()
                plan = decide(snap, Plugins(filters=[f]) if f is not None else None)
                times.append(time.process_time() - start)
                gc.enable()
                runs = f.calls if f is not None else 0
            ms = round(statistics.median(times) * 1000)
            row[label] = {"cpu_median_ms": ms, "filter_runs": runs}
            plans[label] = plan.model_dump_json()
        row["declared_plan_equals_undeclared"] = plans["declared"] == plans["undeclared"]
        rows.append(row)
    print(json.dumps({"bench": "filter_verdicts", "sizes": rows}, indent=1))


if __name__ == "__main__":
    main()
