"""What changed against the golden plans: for each run whose hash differs from
golden_plans.json.gz, its name, the first pass that differs, and what changed there (starts,
stops, moves, holds, the models' statuses), old side against new.

    .venv/bin/python tests/core/golden_diff.py [--against REV] [--limit 20]

The golden file keeps only a hash per run, so the old plans come from another core: REV
(default `main`) is exported into a temporary folder (bench/revision.py) and replays the changed
runs there, in a subprocess, with its own core, generator and harness (the pure-Python core).
`--against` may also name the root of an existing checkout. A run whose old side does not
hash to the recorded value is flagged: REV is then not the core that recorded the file.
Exit status 0 when no run changed, 1 when some did.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if __name__ == "__main__":  # run as a file: the checkout root and this folder importable
    sys.path[:0] = [str(ROOT), str(HERE)]

from golden_plans import (  # noqa: E402
    BENCH,
    SCENARIOS,
    digest,
    load,
    record_bench,
    record_scenario,
)

from bench.revision import run_in, tree_of  # noqa: E402

# Replays runs by name in a checkout (the current directory), with that checkout's own
# golden_plans module; prints {name: [plan essence, ...]} as JSON.
CHILD = r"""
import json, sys
sys.path[:0] = [".", "tests/core"]
from golden_plans import essence, extra_plugins, runs, scenario
from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
out = {}
for name in json.loads(sys.argv[1]):
    kind, key = name.split(" ", 1)
    if kind == "scenario":
        seed = int(key)
        scn = scenario(seed)
        plugins = extra_plugins() if seed % 10 == 0 else None
        out[name] = None if scn is None else [essence(p) for _, p in runs(scn, plugins)]
    else:
        nodes, seed = (int(x) for x in key.split("-")[:2])
        plugins = extra_plugins() if key.endswith("-plugins") else None
        out[name] = [essence(decide(steady_snapshot(nodes, seed=seed), plugins))]
print(json.dumps(out))
"""


STRATEGY = "the first snapshot changed"


def bench_names() -> list[str]:
    return [f"bench {n}-{s}{'-plugins' if p else ''}" for n, s in BENCH for p in (False, True)]


def changed_runs(golden: dict[str, Any]) -> dict[str, str]:
    """The runs whose current plans hash otherwise than recorded, each with its recorded hash
    (STRATEGY for a run whose first snapshot changed)."""
    recorded: dict[str, str] = {}
    for name in bench_names():
        key = name.split(" ", 1)[1]
        nodes, seed = (int(x) for x in key.split("-")[:2])
        want, got = golden["bench"][key], record_bench(nodes, seed, key.endswith("-plugins"))
        if got["snapshot"] != want["snapshot"]:
            recorded[name] = STRATEGY
        elif got["plan"] != want["plan"]:
            recorded[name] = want["plan"]
    for seed in range(SCENARIOS):
        was: dict[str, Any] | None = golden["scenarios"][seed]
        now = record_scenario(seed)
        if was is None or now is None or was["first"] != now["first"]:
            if was != now:
                recorded[f"scenario {seed}"] = STRATEGY
        elif was["plans"] != now["plans"]:
            recorded[f"scenario {seed}"] = was["plans"]
    return recorded


def replay(tree: Path, names: list[str]) -> dict[str, list[Any] | None]:
    """The whole plans of the named runs, made by the checkout at `tree`."""
    env = {"PYTHONPATH": str(tree), "LLM_SCHEDULER_PURE_PYTHON": "1"}
    out: dict[str, list[Any] | None] = run_in(tree, CHILD, names, env, "replaying the runs failed")
    return out


def _shards(shards: list[dict[str, Any]]) -> str:
    return " ".join(f"{s['node']}[{','.join(s['gpus'])}]" for s in shards)


def action_lines(plan: dict[str, Any]) -> list[str]:
    lines = []
    for a in plan.get("actions", []):
        if a["op"] == "start":
            where = _shards(a["shards"])
            lines.append(f"start {a['model']}/{a['profile']} on {where}: {a['reason']}")
        else:
            whom = f" for {a['preempted_for']}" if a.get("preempted_for") else ""
            lines.append(f"stop {a['replica']} ({a['model']}){whom}: {a['reason']}")
    return lines


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan as short lines, one per thing an operator would see change."""
    lines = action_lines(plan)
    lines += [f"move {old} -> {new}" for old, new in sorted(plan.get("moves", {}).items())]
    for model, hold in sorted(plan.get("holds", {}).items()):
        lines.append(f"hold {model} for {hold['for']} until {hold['until']}")
    for model, st in sorted(plan.get("models", {}).items()):
        lines.append(f"status {model}: desired {st['desired']}, live {st['live']}")
        if st.get("pending"):
            lines.append(f"pending {model}: {st['pending']}")
        if st.get("rollout"):
            lines.append(f"rollout {model}: {st['rollout']}")
        if st.get("why"):
            lines.append(f"why {model}: {st['why']}")
    lines += [f"stalled {m}: {d}" for m, d in sorted(plan.get("stalled", {}).items())]
    lines += [f"advice: {a}" for a in plan.get("advice", [])]
    return lines


def first_difference(old: list[Any], new: list[Any]) -> int | None:
    """The index of the first pass whose plan differs (None: the same plans)."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return None if len(old) == len(new) else min(len(old), len(new))


def plan_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """`- line` for what only the old plan says, `+ line` for what only the new one says; a
    difference the lines do not show (a trial's counts, say) is named by its JSON path."""
    was, now = plan_lines(old or {}), plan_lines(new or {})
    out = [f"- {x}" for x in was if x not in now] + [f"+ {x}" for x in now if x not in was]
    return out or [f"~ {path}" for path in differing_paths(old, new)[:8]]


def differing_paths(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [p for k in keys for p in differing_paths(old.get(k), new.get(k), f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = enumerate(zip(old, new, strict=True))
        return [p for i, (a, b) in pairs for p in differing_paths(a, b, f"{path}[{i}]")]
    return [] if old == new else [path or "."]


def describe(
    name: str, old: list[Any] | None, new: list[Any] | None, recorded: str, most: int = 40
) -> list[str]:
    """The report of one changed run, at most `most` lines of its first differing plan."""
    if old is None or new is None:
        return [f"{name}: the scenario could not be drawn on one side"]
    head = f"{name}: {len(old)} passes before, {len(new)} now"
    if recorded == STRATEGY:
        head += f" ({STRATEGY}: the generator differs, re-record from the reference core)"
    elif recorded != digest(old[0] if name.startswith("bench ") else old):
        head += " (the old side does not hash to the recorded plans: another core recorded them)"
    first = first_difference(old, new)
    if first is None:
        return [head, "  the same plans on both sides: the golden file is stale"]
    later = sum(a != b for a, b in zip(old, new, strict=False)) - 1
    lines = [head, f"  first differing pass: {first} (and {later} later ones differ)"]
    a = old[first] if first < len(old) else None
    b = new[first] if first < len(new) else None
    diff = plan_diff(a, b)
    more = [f"  ... and {len(diff) - most} more lines"] if len(diff) > most else []
    return lines + [f"  {line}" for line in diff[:most]] + more


def say(lines: list[str]) -> None:
    """The report goes to stdout (a tool's output, not a test's)."""
    sys.stdout.write("".join(f"{line}\n" for line in lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="a revision, or a checkout's root")
    parser.add_argument("--limit", type=int, default=20, help="changed runs to describe")
    parser.add_argument("--lines", type=int, default=40, help="diff lines per run, at most")
    args = parser.parse_args(argv)
    recorded = changed_runs(load())
    names = list(recorded)
    if not names:
        say(["no run changed: every plan hashes as recorded"])
        return 0
    say([f"{len(names)} runs changed: {', '.join(names)}"])
    shown = names[: max(args.limit, 0)]
    with tree_of(args.against, ROOT) as tree:
        old = replay(tree, shown)
    new = replay(ROOT, shown)
    for name in shown:
        say(describe(name, old.get(name), new.get(name), recorded[name], args.lines))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
