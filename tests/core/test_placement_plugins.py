"""Placement plugins: extra filters (static and dynamic) and scorers passed to decide(), the
node walk and its limit, and explanations that stay right as the pass places replicas."""

from __future__ import annotations

from typing import Any

from scheduler.core.decide import decide
from scheduler.core.inventory import NodeState
from scheduler.core.models import Snapshot, StartAction
from scheduler.core.plugins import Choice, PlaceContext, Plugins


def _gpus(node: str, n: int, model: str = "NVIDIA H100 80GB HBM3") -> list[dict[str, Any]]:
    return [{"id": f"{node}-g{i}", "model": model, "memory_gb": 80} for i in range(n)]


def _snapshot(nodes: list[dict[str, Any]], models: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.model_validate(
        {
            "now": "2026-12-02T10:00:00Z",
            "nodes": nodes,
            "models": models,
            "demand": {m["name"]: {"inflight": 16 * m["scaling"]["max"]} for m in models},
        }
    )


def _node(nid: str, n: int, pool: str = "default", **extra: Any) -> dict[str, Any]:
    return {
        "id": nid,
        "name": nid,
        "pool": pool,
        "cpu_cores": 64,
        "memory_gb": 512,
        "gpus": _gpus(nid, n),
        **extra,
    }


def _model(name: str, gpus: int, count: int) -> dict[str, Any]:
    return {
        "name": name,
        "owner": "org/a",
        "scaling": {"min": count, "max": count},
        "profiles": [{"name": "p", "gpus": gpus}],
    }


def _starts(snap: Snapshot, plugins: Plugins | None = None) -> list[StartAction]:
    return [a for a in decide(snap, plugins).actions if isinstance(a, StartAction)]


class OnlyPool:
    """A static extra filter: reads only the node's description."""

    name = "only-pool"
    static = True

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.calls = 0

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        self.calls += 1
        return None if node.node.pool == self.pool else f"not in pool {self.pool}"


class KeepOneFree:
    """A dynamic extra filter: reads what is free now."""

    name = "keep-one-free"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        if len(choice.gpus) - ctx.profile.gpus < 1:
            return "would leave no GPU free"
        return None


class PreferNode:
    name = "prefer"

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float:
        return 10.0 if node.node.id == self.node_id else 0.0


def test_a_static_extra_filter_decides_and_explains_per_node() -> None:
    snap = _snapshot(
        [_node("a", 8, pool="gpu"), _node("b", 8, pool="cpu"), _node("c", 8, pool="cpu")],
        [_model("m", 4, 3)],
    )
    only = OnlyPool("gpu")
    plan = decide(snap, Plugins(filters=[only]))
    starts = [a for a in plan.actions if isinstance(a, StartAction)]
    assert {s.node for a in starts for s in a.shards} == {"a"}
    assert len(starts) == 2  # node a holds two replicas of 4
    status = plan.models["m"]
    assert status.pending is not None
    # Counted by filter name; each filter's words kept beside.
    assert status.tried[0].short == {"gpu-count": 1, "only-pool": 2}
    assert status.tried[0].reasons == {
        "gpu-count": {"too few free GPUs": 1},
        "only-pool": {"not in pool gpu": 2},
    }
    assert "(not in pool gpu on 2 nodes, too few free GPUs on 1 node)" in status.pending
    # Its verdict is remembered per node for the pass, not asked again on every visit.
    assert only.calls <= 2 * len(snap.nodes)


def test_a_dynamic_extra_filter_runs_on_every_visit() -> None:
    snap = _snapshot([_node("a", 8), _node("b", 8)], [_model("m", 4, 4)])
    starts = _starts(snap, Plugins(filters=[KeepOneFree()]))
    # Each node keeps a GPU free, so each takes one replica of 4 only.
    assert sorted(s.node for a in starts for s in a.shards) == ["a", "b"]


def test_an_extra_scorer_breaks_ties_among_the_scored_nodes() -> None:
    snap = _snapshot([_node(f"n{i}", 8) for i in range(4)], [_model("m", 1, 1)])
    assert _starts(snap)[0].shards[0].node == "n0"  # equally full: the walk's first
    starts = _starts(snap, Plugins(scorers=[PreferNode("n2")]))
    assert starts[0].shards[0].node == "n2"


def test_best_fit_fills_the_tightest_node_first() -> None:
    busy = {
        "id": "r-old",
        "model": "other",
        "profile": "p",
        "state": "running",
        "created_at": "2026-12-02T08:00:00Z",
        "ready_at": "2026-12-02T08:00:00Z",
        "shards": [{"node": "b", "gpus": [f"b-g{i}" for i in range(6)]}],
    }
    snap = _snapshot([_node("a", 8), _node("b", 8)], [_model("m", 2, 1), _model("other", 6, 1)])
    snap = snap.model_copy(
        update={
            "replicas": [
                Snapshot.model_validate(
                    {"now": "2026-12-02T10:00:00Z", "replicas": [busy]}
                ).replicas[0]
            ]
        }
    )
    starts = [a for a in _starts(snap) if a.model == "m"]
    assert starts[0].shards[0].node == "b"  # 2 free of 8 used: fits exactly


def test_explanations_follow_the_placements_of_the_same_pass() -> None:
    # Two models of the same shape: the first takes the last room, the second is told so.
    snap = _snapshot([_node("a", 4), _node("b", 4)], [_model("m1", 4, 2), _model("m2", 4, 1)])
    plan = decide(snap)
    assert len([a for a in plan.actions if isinstance(a, StartAction)]) == 2
    assert plan.models["m2"].tried[0].short == {"gpu-count": 2}
    assert plan.models["m2"].tried[0].reasons == {"gpu-count": {"too few free GPUs": 2}}


def test_a_filter_that_says_different_things_is_counted_once_with_all_its_words() -> None:
    """ProfileTrial.short counts by filter name; `reasons` keeps what the filter
    said where, so one that says two things on two nodes loses neither."""
    snap = _snapshot(
        [
            {**_node("a", 8), "cpu_cores": 2},  # too few CPU cores
            {**_node("b", 8), "memory_gb": 8},  # too little memory
            _node("c", 2),  # too few GPUs
        ],
        [
            {
                "name": "m",
                "owner": "org/a",
                "scaling": {"min": 1, "max": 1},
                "profiles": [{"name": "p", "gpus": 4, "cpu_cores": 8, "memory_gb": 64}],
            }
        ],
    )
    status = decide(snap).models["m"]
    (trial,) = status.tried
    assert trial.short == {"gpu-count": 1, "node-resources": 2}
    assert trial.reasons == {
        "gpu-count": {"too few free GPUs": 1},
        "node-resources": {"too few free CPU cores": 1, "too little free memory": 1},
    }
    assert status.pending == (
        "profile p: no node has 4 free GPUs (too few free CPU cores on 1 node, "
        "too few free GPUs on 1 node, too little free memory on 1 node)"
    )
