"""Reclaim toward weighted fair share (docs/decision-core.md, rules F3, R7): on generated owner
mixes, the GPUs each owner holds once the passes settle, against its weighted fair share.
Prints one JSON object.

    .venv/bin/python -m bench.fair_share [--mixes 200] [--passes 40] [--seed 0]

A mix: one to three nodes of 4 or 8 GPUs, two to four owners (a guarantee of 0 to 2 GPUs or
none, weight 1 to 3), each with one or two models of one class (1 or 2 GPUs a replica, a
minimum of 0 or 1, wanting more than its share). The first owner's models ask first and
borrow the fleet; the others ask once it is settled, and the passes run on (60 s apart, stops
take effect at once, min_lifetime_s 0).

The ideal is worked out here, apart from the core: each owner its guarantee (up to what it
wants; guarantees past the fleet shrink alike), then the rest of the fleet's GPUs by weight,
none past what it wants or its limit (water-filling).
`deviation_gpus`: per mix the largest |held - ideal| over its owners; `largest` over all mixes,
with the quantiles. A replica is 1 or 2 GPUs, so a mix within one replica of the ideal
everywhere is as fair as whole replicas allow (`within_a_replica`). `turn_taking`: owner pairs
whose preemptions of each other (any rule) changed direction twice or more in a mix (must be
0); `reversed_once`: pairs where it changed once (an owner others took from takes back);
`reclaims`: stops toward fair share.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` and `scheduler` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot, StopAction
from scheduler.core.simulate import apply_plan

NOW = "2026-12-02T10:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"
CLASSES = ("opportunistic", "standard", "critical")


def _node(i: int, gpus: int) -> dict[str, Any]:
    devs = [{"id": f"n{i}-g{g}", "model": H100, "memory_gb": 80} for g in range(gpus)]
    return {"id": f"n{i}", "name": f"n{i}", "cpu_cores": 1024, "memory_gb": 8192, "gpus": devs}


def _model(name: str, owner: str, cls: str, gpus: int, lo: int, hi: int) -> dict[str, Any]:
    prof = {"name": "p", "gpus": gpus, "shards": 1, "cpu_cores": 1, "memory_gb": 1}
    scaling = {"min": lo, "max": hi, "target_per_replica": 1}
    return {"name": name, "owner": owner, "class": cls, "scaling": scaling, "profiles": [prof]}


def owner_mix(rng: random.Random, mixed_classes: bool = False) -> tuple[Snapshot, Snapshot]:
    """A mix, as (the first owner alone, everyone): both snapshots of the same fleet, quotas
    and settings. One class for all (standard) and small minimums, unless `mixed_classes`
    (any class, minimums up to 3: what the property tests ask for)."""
    nodes = [_node(i, rng.choice((4, 8))) for i in range(rng.randint(1, 3))]
    gpus = sum(len(n["gpus"]) for n in nodes)
    quotas: list[dict[str, Any]] = []
    models: list[list[dict[str, Any]]] = []
    for o in range(rng.randint(2, 4)):
        owner = f"org/t{o}"
        g = rng.choice((None, 0, 1, 2))
        quota: dict[str, Any] = {"owner": owner, "weight": rng.choice((1, 1, 2, 3))}
        if g is not None:
            quota["guarantee"] = {"gpus": g}
        if rng.random() < 0.2:
            quota["limit"] = {"gpus": rng.randint(2, gpus)}
        quotas.append(quota)
        mine = []
        for k in range(rng.randint(1, 2)):
            size = rng.choice((1, 1, 2))
            cls = rng.choice(CLASSES) if mixed_classes else "standard"
            lo = rng.choice((0, 1, 2, 3) if mixed_classes else (0, 0, 1))
            mine.append(_model(f"t{o}-m{k}", owner, cls, size, lo, max(gpus // size, 1)))
        models.append(mine)
    settings = {"min_lifetime_s": 0, "preempt_hold_s": rng.choice((0, 120, 300))}
    everyone = [m for mine in models for m in mine]

    def snap(ms: list[dict[str, Any]]) -> Snapshot:
        demand = {m["name"]: {"inflight": 1000} for m in ms}
        return Snapshot.model_validate(
            {
                "now": NOW,
                "nodes": nodes,
                "models": ms,
                "quotas": quotas,
                "demand": demand,
                "settings": settings,
            }
        )

    return snap(models[0]), snap(everyone)


def late_arrival(first: Snapshot, everyone: Snapshot, passes: int) -> list[tuple[Snapshot, Plan]]:
    """The first owner alone until it is settled (at most `passes`), then everyone: every
    (snapshot, plan) of the second part."""
    s = first
    for _ in range(passes):
        plan = decide(s)
        if not plan.actions:
            break
        s = apply_plan(s, plan, 60)
    s = everyone.model_copy(update={"replicas": s.replicas, "now": s.now})
    out = []
    for _ in range(passes):
        plan = decide(s)
        out.append((s, plan))
        s = apply_plan(s, plan, 60)
    out.append((s, decide(s)))
    return out


def held_gpus(s: Snapshot) -> dict[str, float]:
    owner = {m.name: m.owner for m in s.models}
    out = {q.owner: 0.0 for q in s.quotas}
    for r in s.replicas:
        if r.counts:
            out[owner[r.model]] = out.get(owner[r.model], 0.0) + sum(
                len(sh.gpus) for sh in r.shards
            )
    return out


def ideal_gpus(s: Snapshot) -> dict[str, float]:
    """Weighted water-filling of the fleet's GPUs over what each owner's models want."""
    capacity = float(sum(len(n.gpus) for n in s.nodes))
    want: dict[str, float] = {q.owner: 0.0 for q in s.quotas}
    for m in s.models:
        want[m.owner] += m.profiles[0].gpus * m.scaling.max
    limit = {q.owner: q.limit.gpus for q in s.quotas if q.limit and q.limit.gpus is not None}
    want = {o: min(w, limit.get(o, w)) for o, w in want.items()}
    base = {q.owner: min(want[q.owner], q.guarantee.gpus or 0.0) for q in s.quotas}
    promised = sum(base.values())
    if promised > capacity:  # guarantees past the fleet: each its part of what there is
        base = {o: g * capacity / promised for o, g in base.items()}
    weight = {q.owner: q.weight for q in s.quotas}
    left = capacity - sum(base.values())
    out = dict(base)
    open_ = {o for o in want if want[o] > base[o]}
    while open_ and left > 1e-9:
        level = left / sum(weight[o] for o in open_)
        full = {o for o in open_ if want[o] - out[o] <= weight[o] * level + 1e-9}
        if not full:
            for o in open_:
                out[o] += weight[o] * level
            break
        for o in full:
            left -= want[o] - out[o]
            out[o] = want[o]
        open_ -= full
    return out


def _turn_taking(plans: list[tuple[Snapshot, Plan]]) -> tuple[int, int, int]:
    """Between owners, by preemptions of any rule: pairs that took turns (the direction
    changed twice or more: A from B, B from A, A from B), pairs where it changed once (A was
    taken from by others, then took back), and the stops toward fair share."""
    owner = {m.name: m.owner for m in plans[0][0].models}
    ways: dict[tuple[str, str], list[bool]] = {}
    fair = 0
    for _, plan in plans:
        for a in plan.actions:
            if isinstance(a, StopAction) and a.preempted_for is not None:
                taker, victim = owner[a.preempted_for], owner[a.model]
                fair += a.code == "preempted_fair_share"
                if taker == victim:
                    continue
                seen = ways.setdefault((min(taker, victim), max(taker, victim)), [])
                if not seen or seen[-1] != (taker < victim):
                    seen.append(taker < victim)
    turns = sum(1 for w in ways.values() if len(w) > 2)
    return turns, sum(1 for w in ways.values() if len(w) == 2), fair


def run(mixes: int, passes: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    deviations: list[float] = []
    within = turns = reversed_once = reclaims = 0
    worst: dict[str, Any] = {}
    started = time.process_time()
    for i in range(mixes):
        first, everyone = owner_mix(rng)
        plans = late_arrival(first, everyone, passes)
        final = plans[-1][0]
        held, ideal = held_gpus(final), ideal_gpus(final)
        dev = max(abs(held[o] - ideal[o]) for o in ideal)
        deviations.append(dev)
        size = max(m.profiles[0].gpus for m in final.models)
        within += dev <= size + 1e-9
        pairs, once, fair = _turn_taking(plans)
        turns += pairs
        reversed_once += once
        reclaims += fair
        if dev >= worst.get("deviation_gpus", -1.0):
            worst = {"mix": i, "deviation_gpus": round(dev, 2), "held": held, "ideal": ideal}
    deviations.sort()
    return {
        "mixes": mixes,
        "passes": passes,
        "seed": seed,
        "deviation_gpus": {
            "largest": round(deviations[-1], 2),
            "p50": round(deviations[len(deviations) // 2], 2),
            "p90": round(deviations[int(len(deviations) * 0.9)], 2),
            "mean": round(sum(deviations) / len(deviations), 3),
        },
        "within_a_replica": within,
        "turn_taking": turns,
        "reversed_once": reversed_once,
        "reclaims": reclaims,
        "worst": {
            k: v if not isinstance(v, dict) else {o: round(x, 2) for o, x in v.items()}
            for k, v in worst.items()
        },
        "cpu_s": round(time.process_time() - started, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixes", type=int, default=200)
    ap.add_argument("--passes", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(run(args.mixes, args.passes, args.seed), indent=1))


if __name__ == "__main__":
    main()
