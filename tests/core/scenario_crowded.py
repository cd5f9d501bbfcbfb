"""Crowded scenarios: three or four models on one or two small nodes, of mixed classes and
owners, with guarantees and limits; the room is short, so preemption and reclaim decide
who runs. The shape of the hand-written cases that used to cycle for hours."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from scenario_gen import OWNERS, T0, Scenario, demands, settings_dicts, ts

from scheduler.core.models import CLASS_RANK

H100 = "NVIDIA H100 80GB HBM3"
CLASSES = ["opportunistic", "standard", "critical"]
CROWD_OWNERS = ["org/a", "org/b", "org/a", "org/a/x"]  # mostly one owner: guarantees bind


@st.composite
def small_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    nodes = []
    for i in range(draw(st.integers(1, 2))):
        nid = f"n{i}"
        gpus = [
            {"id": f"{nid}-g{j}", "model": H100, "memory_gb": 80}
            for j in range(draw(st.sampled_from([1, 2, 4, 3])))
        ]
        nodes.append(
            {"id": nid, "name": f"gpu-{i}", "cpu_cores": 64, "memory_gb": 512, "gpus": gpus}
        )
    return nodes


@st.composite
def crowded_models(draw: st.DrawFn) -> list[dict[str, Any]]:
    models = []
    for i in range(draw(st.integers(3, 4))):
        lo = draw(st.sampled_from([0, 1, 0, 2]))
        profs: list[dict[str, Any]] = [
            {
                "name": "p0",
                "gpus": draw(st.sampled_from([1, 2, 1])),
                "cpu_cores": draw(st.sampled_from([4, 0])),
                "memory_gb": draw(st.sampled_from([16, 0])),
            }
        ]
        if draw(st.integers(0, 3)) == 0:
            profs.append({"name": "small", "gpus": 1, "cpu_cores": 0, "memory_gb": 0})
        models.append(
            {
                "name": f"m{i}",
                "owner": draw(st.sampled_from(CROWD_OWNERS)),
                "class": draw(st.sampled_from(CLASSES)),
                "scaling": {
                    "min": lo,
                    "max": lo + draw(st.integers(1, 3)),
                    "target_per_replica": 4,
                    "on_demand": draw(st.integers(0, 4)) == 0,
                },
                "profiles": profs,
            }
        )
    return models


@st.composite
def crowded_quotas(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for owner in draw(st.lists(st.sampled_from(OWNERS), min_size=1, max_size=3, unique=True)):
        gpus = draw(st.sampled_from([1.0, 2.0, 1.0, 4.0]))
        full = draw(st.booleans())
        guarantee = {"gpus": gpus, "cpu_cores": 64.0, "memory_gb": 512.0} if full else {}
        q: dict[str, Any] = {"owner": owner, "guarantee": guarantee or {"gpus": gpus}}
        if draw(st.integers(0, 3)) == 0:
            q["limit"] = {"gpus": gpus + draw(st.sampled_from([0.0, 1.0, 2.0]))}
        if draw(st.integers(0, 3)) == 0:
            q["weight"] = 2.0
        out.append(q)
    return out


@st.composite
def crowded_scenarios(draw: st.DrawFn) -> Scenario:
    """Models busy one group after another (room is taken back), then, in the final pass,
    every model's own demand."""
    nodes, models = draw(small_nodes()), draw(crowded_models())
    names = [m["name"] for m in models]
    base = {
        "now": ts(T0),
        "settings": draw(settings_dicts(small=True)),
        "nodes": nodes,
        "models": models,
        "quotas": draw(crowded_quotas()),
        "demand": {},
    }
    # Models get busy in turns, by class or in any order: the late ones take room back.
    order = draw(st.permutations(range(len(models))))
    if draw(st.booleans()):
        order = sorted(order, key=lambda i: CLASS_RANK[models[i]["class"]])
    cuts = sorted(draw(st.lists(st.integers(1, len(models)), min_size=1, max_size=3)))
    passes = []
    now = T0
    for cut in cuts:
        advance = draw(st.sampled_from([700, 0, 30, 120]))
        busy = [m["name"] if i in order[:cut] else "" for i, m in enumerate(models)]
        passes.append((draw(demands(busy, now, sparse=False)), float(advance)))
        now += timedelta(seconds=advance)
    return Scenario(
        base=base,
        passes=passes,
        slow_stops=draw(st.booleans()),
        final_demand=draw(demands(names, now, sparse=False)),
    )
