"""Recorded plans that a change of the core's structure must keep: the same starts, stops,
moves, placements, holds and reason texts, on bench/fleetgen.py's steady snapshots and on
1,000 generated scenarios (scenario_gen.scenarios, each run as its history of passes).

Plans may gain fields (a reason's code, say): those are named in ADDED and left out of what
is compared; nothing else may change. The golden file keeps a hash per run and a few whole
plans (to show what changed when a hash differs); it is written by this module run as a
script, with the core whose plans are the reference:

    .venv/bin/python tests/core/golden_plans.py            # rewrites golden_plans.json.gz

Before re-recording, `tests/core/golden_diff.py [--against REV]` shows each changed run's
first differing pass, old plan against new.

Scenarios are drawn from a seeded random source, so the same seed gives the same scenario as
long as the strategies and hypothesis' drawing do not change; a changed first snapshot is
reported as such (regenerate the file from the reference core), not as a changed plan.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # run as a file: the checkout root and this folder importable
    sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hypothesis.control import BuildContext  # noqa: E402
from hypothesis.errors import StopTest  # noqa: E402
from hypothesis.internal.conjecture.data import ConjectureData  # noqa: E402
from scenario_gen import Scenario, scenarios  # noqa: E402
from scenario_runs import dump, operator_changes, step, with_demand  # noqa: E402

from bench.fleetgen import steady_snapshot  # noqa: E402
from scheduler.core.decide import decide  # noqa: E402
from scheduler.core.inventory import NodeState  # noqa: E402
from scheduler.core.models import Plan, Snapshot  # noqa: E402
from scheduler.core.plugins import Choice, PlaceContext, Plugins  # noqa: E402
from scheduler.core.validate import parse_snapshot  # noqa: E402

GOLDEN = HERE / "golden_plans.json.gz"
SCENARIOS = 1000
BENCH = ((60, 0), (200, 1), (1000, 0))  # (nodes, seed) of fleetgen.steady_snapshot
WHOLE = 4  # scenarios kept whole, besides the hashes
# Fields plans gained after the reference was recorded: left out of the comparison.
ADDED: frozenset[str] = frozenset(
    {
        "code",
        "pending_code",
        "timed_out",
        "unresolvable",
        "prefetches",
        "prefetch",
        "reservations",
        "reserved",
        "usage",
    }
)
# Snapshot fields added since: a node's host volumes and model cache (empty in fleetgen's), a
# model's gateway bounds (None; the decision never reads them), the settings' weight rates,
# the prefetch jobs and their limit (none run in the recorded runs), decayed usage (off, and
# empty), the removed profiles' dates (none in fleetgen's).
SNAPSHOT_ADDED: frozenset[str] = frozenset(
    {
        "host_volumes",
        "cache",
        "activation_timeout_s",
        "max_queued",
        "download_gbps",
        "load_gbps",
        "prefetches",
        "prefetch_max",
        "usage",
        "usage_half_life_s",
        "reservations",
        "removed_profiles",
    }
)


class OddNodes:
    """A third-party dynamic filter: refuses nodes by a hash of their id."""

    name = "odd-nodes"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        return "odd node" if zlib.crc32(node.node.id.encode()) % 5 == 0 else None


class PreferLowIds:
    """A third-party scorer."""

    name = "low-ids"

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float:
        return -0.01 * (zlib.crc32(node.node.id.encode()) % 7)


def extra_plugins() -> Plugins:
    return Plugins(filters=[OddNodes()], scorers=[PreferLowIds()])


def _strip(value: Any, added: frozenset[str] = ADDED) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, added) for k, v in value.items() if k not in added}
    if isinstance(value, list):
        return [_strip(v, added) for v in value]
    return value


def essence(plan: Plan) -> Any:
    """The plan as compared: its JSON, without the fields named in ADDED."""
    return _strip(json.loads(plan.model_dump_json(by_alias=True)))


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def scenario(seed: int) -> Scenario | None:
    """The scenario of a seed (None: the strategy gave up on that random source)."""
    data = ConjectureData(random=random.Random(seed))
    try:
        with BuildContext(data, wrapped_test=scenario):
            drawn: Scenario = data.draw(scenarios())
    except StopTest:
        return None
    return drawn


def runs(scn: Scenario, plugins: Plugins | None) -> Iterator[tuple[Snapshot, Plan]]:
    """Every (snapshot, plan) of the scenario's history, then of its final pass."""
    snap = parse_snapshot({**scn.base, "replicas": []})
    for demand, advance in scn.passes:
        snap = with_demand(snap, demand)
        plan = decide(snap, plugins)
        yield snap, plan
        snap = step(snap, plan, advance, scn.slow_stops)
    final = operator_changes(snap, scn)
    yield final, decide(final, plugins)


def record_scenario(seed: int) -> dict[str, Any] | None:
    scn = scenario(seed)
    if scn is None:
        return None
    plugins = extra_plugins() if seed % 10 == 0 else None
    plans = [essence(p) for _, p in runs(scn, plugins)]
    out: dict[str, Any] = {"first": digest(scn.base), "plans": digest(plans)}
    if seed < WHOLE:
        out["whole"] = plans
    return out


def record_bench(nodes: int, seed: int, plugins: bool) -> dict[str, Any]:
    snap = steady_snapshot(nodes, seed=seed)
    plan = essence(decide(snap, extra_plugins() if plugins else None))
    snapshot = _strip(dump(snap), SNAPSHOT_ADDED)
    out: dict[str, Any] = {"snapshot": digest(snapshot), "plan": digest(plan)}
    if nodes <= 60:
        out["whole"] = plan
    return out


def record() -> dict[str, Any]:
    bench = {
        f"{nodes}-{seed}{'-plugins' if plugins else ''}": record_bench(nodes, seed, plugins)
        for nodes, seed in BENCH
        for plugins in (False, True)
    }
    return {"bench": bench, "scenarios": [record_scenario(s) for s in range(SCENARIOS)]}


def load() -> dict[str, Any]:
    with gzip.open(GOLDEN, "rt") as f:
        loaded: dict[str, Any] = json.load(f)
    return loaded


if __name__ == "__main__":
    recorded = record()
    with gzip.GzipFile(GOLDEN, "wb", mtime=0) as f:
        f.write(json.dumps(recorded, sort_keys=True, separators=(",", ":")).encode())
