"""Cache-aware placement (docs/decision-core.md, rules W1-W5): warm nodes weighed against
packing, the cache-room filter, warm targets for moves and roll-outs, the victims' tie-break,
and nothing that deletes weights. Snapshot in, plan out; hypothesis over small fleets."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.builtin_rules import CACHE_FULL
from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot, StartAction
from scheduler.core.warmth import UNKNOWN_SAVING, warm_saving

NOW = "2026-12-02T10:00:00Z"
LONG_AGO = "2026-12-02T08:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"
GB = 10**9
EPS = 1e-9


def cache(*sources: str, free_gb: float | None = None, size_gb: float = 16) -> dict[str, Any]:
    snaps = [
        {
            "source": s,
            "commit": f"{i + 1:040x}",
            "revisions": ["main"],
            "bytes": int(size_gb * GB),
        }
        for i, s in enumerate(sources)
    ]
    free = None if free_gb is None else int(free_gb * GB)
    return {"volume": "llm-model-cache", "free_bytes": free, "snapshots": snaps}


def node(nid: str, gpus: int = 8, cached: dict[str, Any] | None = None) -> dict[str, Any]:
    devs = [{"id": f"{nid}-g{i}", "model": H100, "memory_gb": 80} for i in range(gpus)]
    return {
        "id": nid,
        "name": nid,
        "cpu_cores": 256,
        "memory_gb": 2048,
        "gpus": devs,
        "host_volumes": ["llm-model-cache"],
        "cache": cached,
    }


def model(name: str, gpus: int = 1, want: int = 1, **serve: Any) -> dict[str, Any]:
    return {
        "name": name,
        "owner": "org/a",
        "serve": {"source": f"org/{name}", **serve},
        "scaling": {"min": want, "max": want},
        "profiles": [{"name": "p", "gpus": gpus, "cpu_cores": 1, "memory_gb": 1}],
    }


def filler(nid: str, used: int) -> list[dict[str, Any]]:
    """Replicas of model `fill` taking the first `used` GPUs of a node."""
    return [
        {
            "id": f"fill-{nid}-{i}",
            "model": "fill",
            "profile": "p",
            "state": "running",
            "created_at": LONG_AGO,
            "ready_at": LONG_AGO,
            "shards": [{"node": nid, "gpus": [f"{nid}-g{i}"]}],
        }
        for i in range(used)
    ]


def snapshot(nodes: list[dict[str, Any]], models: list[dict[str, Any]], **body: Any) -> Snapshot:
    replicas = body.pop("replicas", [])
    fill = model("fill", want=len([r for r in replicas if r["model"] == "fill"]))
    return Snapshot.model_validate(
        {
            "now": NOW,
            "nodes": nodes,
            "models": [fill, *models],
            "replicas": replicas,
            "settings": {"scale_down_window_s": 0},
            **body,
        }
    )


def started_on(plan: Plan, name: str = "m") -> list[str]:
    return [
        a.shards[0].node for a in plan.actions if isinstance(a, StartAction) and a.model == name
    ]


Fleet = list[tuple[int, bool]]  # per node: GPUs in use, whether its cache holds org/m

fleets = st.lists(st.tuples(st.integers(0, 8), st.booleans()), min_size=1, max_size=8)


def _fleet(
    layout: Fleet, warm_cache: dict[str, Any] | None = None, size_gb: float = 16
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, replicas = [], []
    for i, (used, warm) in enumerate(layout):
        held = (warm_cache or cache("org/m", size_gb=size_gb)) if warm else None
        nodes.append(node(f"n{i}", cached=held))
        replicas += filler(f"n{i}", used)
    return nodes, replicas


# ---------------------------------------------------------------- W1: warm against packing


def saving(weights_gb: int | None) -> float:
    """What a warm node saves of a cold start at the default rates (10 Gbit/s download, 16
    load, 20 s of server start)."""
    if weights_gb is None:
        return UNKNOWN_SAVING
    download, load = weights_gb * 8 / 10, weights_gb * 8 / 16
    return download / (20 + download + load)


def test_a_warm_start_saves_more_the_larger_the_weights() -> None:
    sizes = [1, 16, 140, 810, 10_000]
    savings = [warm_saving(gb * GB, 10.0, 16.0) for gb in sizes]
    assert savings == sorted(savings) and savings[0] > 0 and savings[-1] < 1
    assert [round(saving(gb), 9) for gb in sizes] == [round(s, 9) for s in savings]
    assert warm_saving(None, 10.0, 16.0) == UNKNOWN_SAVING
    assert warm_saving(16 * GB, 1.0, 16.0) > warm_saving(16 * GB, 10.0, 16.0)  # a slower link


@settings(max_examples=150, deadline=None)
@given(layout=fleets, gpus=st.sampled_from([1, 2]), weights=st.sampled_from([None, 16, 140]))
def test_warm_wins_exactly_when_its_packing_is_within_its_saving(
    layout: Fleet, gpus: int, weights: int | None
) -> None:
    nodes, replicas = _fleet(layout, size_gb=weights or 0)  # 0: the cache does not size it
    m = model("m", gpus, **({} if weights is None else {"weights_gb": float(weights)}))
    warm_plan = decide(snapshot(nodes, [m], replicas=replicas))
    cold_nodes = [{**n, "cache": None} for n in nodes]
    cold_plan = decide(snapshot(cold_nodes, [m], replicas=replicas))
    margin = saving(weights)
    packing = {f"n{i}": (used + gpus) / 8 for i, (used, _) in enumerate(layout)}
    warm = {f"n{i}" for i, (_, w) in enumerate(layout) if w}
    feasible = {f"n{i}" for i, (used, _) in enumerate(layout) if 8 - used >= gpus}
    cold_choice, choice = started_on(cold_plan), started_on(warm_plan)
    assert bool(choice) == bool(feasible) == bool(cold_choice)
    if not feasible:
        return
    (c,), (x,) = cold_choice, choice
    if x not in warm:
        assert x == c  # the cold choice is today's
        assert all(packing[w] + margin <= packing[c] + EPS for w in warm & feasible)
    else:
        assert packing[x] + margin + EPS >= packing[c]


@settings(max_examples=60, deadline=None)
@given(layout=fleets, others=st.lists(st.sampled_from(["org/x", "org/y"]), max_size=2))
def test_caches_without_the_model_change_no_plan(layout: Fleet, others: list[str]) -> None:
    """A node whose cache holds other models (free room unknown) places as a node without one."""
    nodes, replicas = _fleet([(used, True) for used, _ in layout], cache(*others))
    bare = [{**n, "cache": None} for n in nodes]
    m = [model("m", 2)]
    assert decide(snapshot(nodes, m, replicas=replicas)) == decide(
        snapshot(bare, m, replicas=replicas)
    )


# ---------------------------------------------------------------- W2: room for the weights


@settings(max_examples=150, deadline=None)
@given(
    frees=st.lists(st.one_of(st.none(), st.integers(0, 60)), min_size=1, max_size=6),
    warm_at=st.sets(st.integers(0, 5)),
    weights=st.one_of(st.none(), st.integers(1, 50)),
)
def test_a_cold_node_without_room_for_the_weights_is_never_chosen(
    frees: list[int | None], warm_at: set[int], weights: int | None
) -> None:
    nodes = []
    for i, free in enumerate(frees):
        held = ("org/m",) if i in warm_at else ()
        nodes.append(node(f"n{i}", cached=cache(*held, free_gb=free, size_gb=weights or 0)))
    serve = {} if weights is None else {"weights_gb": float(weights)}
    plan = decide(snapshot(nodes, [model("m", **serve)]))
    roomy = {
        f"n{i}"
        for i, free in enumerate(frees)
        if i in warm_at or free is None or weights is None or weights <= free
    }
    assert set(started_on(plan)) <= roomy
    assert bool(started_on(plan)) == bool(roomy)
    if not roomy:
        trial = plan.models["m"].tried[0]
        assert trial.reasons["model-cache-room"] == {CACHE_FULL: len(frees)}
        assert CACHE_FULL in (plan.models["m"].pending or "")
    if weights is None:  # unknown never blocks: as if no room were reported
        unknown = [{**n, "cache": {**n["cache"], "free_bytes": None}} for n in nodes]
        assert plan == decide(snapshot(unknown, [model("m")]))
