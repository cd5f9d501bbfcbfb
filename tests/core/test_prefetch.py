"""Rules PF1-PF3: prefetch ahead of demand, on the room the pass's starts leave."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decide import decide
from scheduler.core.models import Plan, StartAction
from scheduler.core.prefetch import PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB
from scheduler.core.validate import parse_snapshot

H100 = "NVIDIA H100 80GB HBM3"
COMMIT = "a" * 40
GB = 10**9


def _node(nid: str, *, gpus: int = 2, cache: bool = True, free_gb: int | None = 1000, **over: Any):
    node: dict[str, Any] = {
        "id": nid,
        "name": nid,
        "cpu_cores": 32,
        "memory_gb": 256,
        "gpus": [{"id": f"{nid}-g{i}", "model": H100, "memory_gb": 80} for i in range(gpus)],
    }
    if cache:
        node["host_volumes"] = ["llm-model-cache"]
        free = None if free_gb is None else free_gb * GB
        node["cache"] = {"volume": "llm-model-cache", "free_bytes": free}
    node.update(over)
    return node


def _model(name: str = "m", prefetch: int | None = 2, **serve: Any) -> dict[str, Any]:
    return {
        "name": name,
        "owner": "org/a",
        "scaling": {"min": 0, "max": 4},
        "profiles": [{"name": "p", "gpus": 2, "cpu_cores": 8, "memory_gb": 64}],
        "serve": {"source": f"org/{name}", "prefetch": prefetch, **serve},
    }


def _prefetch(nid: str, state: str = "running", model: str = "m", **over: Any) -> dict[str, Any]:
    return {
        "id": f"llm-prefetch-{model}-{nid}",
        "model": model,
        "node": nid,
        "source": f"org/{model}",
        "state": state,
        "cpu_cores": PREFETCH_CPU_CORES,
        "memory_gb": PREFETCH_MEMORY_GB,
        **over,
    }


def _plan(nodes: list[dict], models: list[dict], **snap: Any) -> Plan:
    return decide(
        parse_snapshot({"now": "2026-12-05T10:00:00Z", "nodes": nodes, "models": models, **snap})
    )


def _started(plan: Plan) -> list[str]:
    return sorted(a.node for a in plan.prefetches if a.op == "start")


def test_a_model_gets_its_weights_on_n_nodes_with_a_cache_and_the_most_room_first() -> None:
    nodes = [_node("n1", free_gb=100), _node("n2", free_gb=900), _node("n3", free_gb=500)]
    nodes.append(_node("n4", cache=False))
    plan = _plan(nodes, [_model(prefetch=2)])
    assert _started(plan) == ["n2", "n3"]
    assert {a.code for a in plan.prefetches} == {"prefetch_ahead"}
    status = plan.prefetch["m"]
    assert status.wanted == 2 and status.running == ["n2", "n3"] and status.short is None


def test_nodes_that_hold_it_fetch_it_or_failed_count_and_are_not_asked_again() -> None:
    cached = _node("n1")
    cached["cache"]["snapshots"] = [{"source": "org/m", "commit": COMMIT, "revisions": ["main"]}]
    nodes = [cached, _node("n2"), _node("n3"), _node("n4")]
    prefetches = [_prefetch("n2"), _prefetch("n3", "failed")]
    plan = _plan(nodes, [_model(prefetch=3)], prefetches=prefetches)
    assert _started(plan) == ["n4"]
    status = plan.prefetch["m"]
    assert (status.cached, status.running, status.failed) == (["n1"], ["n2", "n4"], ["n3"])


def test_no_node_without_room_in_its_cache_nor_one_no_profile_fits() -> None:
    nodes = [_node("small", free_gb=10), _node("one-gpu", gpus=1), _node("draining", draining=True)]
    plan = _plan(nodes, [_model(prefetch=1, weights_gb=140)])
    assert plan.prefetches == []
    assert plan.prefetch["m"].short_code == "prefetch_no_node"


def test_at_most_prefetch_max_run_in_the_fleet() -> None:
    nodes = [_node(f"n{i}") for i in range(6)]
    models = [_model("a", prefetch=3), _model("b", prefetch=3)]
    plan = _plan(
        nodes, models, settings={"prefetch_max": 4}, prefetches=[_prefetch("n0", model="b")]
    )
    assert len(_started(plan)) == 3  # one runs already
    assert plan.prefetch["b"].short_code == "prefetch_limit"


def test_a_start_that_needs_the_node_stops_the_prefetch_there() -> None:
    tight = _node("n1", cpu_cores=8.2, memory_gb=64.5)  # the replica's 8 cores and 64 GB
    demand = {"m": {"inflight": 5}}
    model = _model(prefetch=1)
    plan = _plan([tight], [model], prefetches=[_prefetch("n1")], demand=demand)
    assert any(isinstance(a, StartAction) for a in plan.actions)
    (stop,) = plan.prefetches
    assert (stop.op, stop.code, stop.id) == ("stop", "prefetch_yields", "llm-prefetch-m-n1")


def test_a_prefetch_no_longer_asked_for_is_stopped() -> None:
    old = _prefetch("n1", revision="v1")
    plan = _plan([_node("n1")], [_model(prefetch=1, revision="v2")], prefetches=[old])
    stops = [a for a in plan.prefetches if a.op == "stop"]
    assert [(a.id, a.code) for a in stops] == [(old["id"], "prefetch_unwanted")]
    plan = _plan([_node("n1")], [_model(prefetch=None)], prefetches=[_prefetch("n1")])
    assert [a.code for a in plan.prefetches] == ["prefetch_unwanted"]


def test_a_prefetch_on_a_node_that_left_drains_or_is_ineligible_is_stopped() -> None:
    nodes = [_node("n1", draining=True), _node("n2", eligible=False), _node("n3")]
    held = [_prefetch(n) for n in ("n1", "n2", "n3", "gone")]
    plan = _plan(nodes, [_model(prefetch=4)], prefetches=held)
    stops = sorted(a.node for a in plan.prefetches if a.op == "stop")
    assert stops == ["gone", "n1", "n2"]
    assert {a.code for a in plan.prefetches if a.op == "stop"} == {"prefetch_unwanted"}


def test_no_prefetch_where_a_replica_of_the_model_runs() -> None:
    rep = {
        "id": "r1",
        "model": "m",
        "profile": "p",
        "state": "running",
        "created_at": "2026-12-05T09:00:00Z",
        "shards": [{"node": "n1", "gpus": ["n1-g0", "n1-g1"]}],
    }
    plan = _plan([_node("n1"), _node("n2")], [_model(prefetch=2)], replicas=[rep])
    assert _started(plan) == ["n2"]


@settings(max_examples=60, deadline=None)
@given(
    frees=st.lists(st.none() | st.integers(0, 2000), min_size=1, max_size=8),
    wanted=st.integers(1, 6),
    limit=st.integers(0, 4),
    running=st.integers(0, 3),
    size=st.integers(1, 500),
)
def test_prefetch_invariants(
    frees: list[int], wanted: int, limit: int, running: int, size: int
) -> None:
    """Never more than prefetch_max running, never two on a node, only on nodes with a cache
    that has room for known weights, never more than asked for, and replicas' plans are the
    same with and without prefetching (a prefetch takes no replica's room)."""
    nodes = [_node(f"n{i}", free_gb=f) for i, f in enumerate(frees)]
    held = [_prefetch(f"n{i}") for i in range(min(running, len(nodes)))]
    snap = {
        "settings": {"prefetch_max": limit},
        "prefetches": held,
        "demand": {"m": {"inflight": 3}},
    }
    plan = _plan(nodes, [_model(prefetch=wanted, weights_gb=size)], **snap)
    starts = [a for a in plan.prefetches if a.op == "start"]
    stopped = {a.id for a in plan.prefetches if a.op == "stop"}
    still = [p for p in held if p["id"] not in stopped]
    assert len(still) + len(starts) <= max(limit, len(still))
    on = [a.node for a in starts] + [p["node"] for p in still]
    assert len(on) == len(set(on))
    assert len(starts) + len(still) <= wanted or not starts
    free = {n["id"]: n["cache"]["free_bytes"] for n in nodes}
    assert all(free[a.node] is None or free[a.node] >= size * GB for a in starts)
    # The best first: no node left out holds more than one taken (unknown counts least), and
    # none with room is left out while more are wanted and allowed.
    replicas = {sh.node for a in plan.actions if isinstance(a, StartAction) for sh in a.shards}
    taken = {a.node for a in starts}
    rest = set(free) - taken - replicas - {p["node"] for p in held}
    roomy = [f for n, f in free.items() if n in rest and (f is None or f >= size * GB)]
    under = len(starts) + len(still) < min(wanted, limit)
    assert not (roomy and under), "a node with room was left out though more were wanted"
    if starts:
        least = min(-1 if free[n] is None else free[n] for n in taken)
        assert all((-1 if f is None else f) <= least for f in roomy)
    bare = _plan(nodes, [_model(prefetch=None, weights_gb=size)], demand=snap["demand"])
    assert plan.actions == bare.actions
