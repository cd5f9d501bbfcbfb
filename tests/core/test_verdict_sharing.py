"""Static verdicts are shared by alike nodes: filed by the node's kind (its shape's number in the
pass), so nodes of one shape get one verdict and nodes of another shape get their own."""

from __future__ import annotations

from typing import Any

from scheduler.core.inventory import Inventory
from scheduler.core.models import Snapshot
from scheduler.core.placement import Placer
from scheduler.core.plugins import default_filters, default_scorers

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def _node(nid: str, model: str, n: int = 8, **extra: Any) -> dict[str, Any]:
    gpus = [{"id": f"{nid}-g{i}", "model": model, "memory_gb": 80} for i in range(n)]
    return {"id": nid, "name": nid, "cpu_cores": 64, "memory_gb": 512, "gpus": gpus, **extra}


def _snapshot() -> Snapshot:
    return Snapshot.model_validate(
        {
            "now": "2026-12-02T10:00:00Z",
            # b and d are a's shape (GPU order aside); c has other GPUs; e is not eligible.
            "nodes": [
                _node("a", H100),
                _node("b", H100),
                _node("c", A100),
                _node("d", H100),
                _node("e", H100, eligible=False),
            ],
            "models": [
                {
                    "name": "m",
                    "owner": "org/a",
                    "profiles": [{"name": "p", "gpus": 2, "gpu_models": [H100]}],
                }
            ],
        }
    )


def test_alike_nodes_share_one_verdict_and_unlike_ones_do_not() -> None:
    snap = _snapshot()
    inv = Inventory.build(snap)
    kinds = {nid: ns.kind for nid, ns in inv.nodes.items()}
    assert kinds["a"] == kinds["b"] == kinds["d"]
    assert len({kinds["a"], kinds["c"], kinds["e"]}) == 3
    placer = Placer(default_filters(), default_scorers(), len(snap.nodes))
    model = snap.models[0]
    profile = model.profiles[0]
    held = {nid: placer.could_hold(model, profile, inv.nodes[nid]) for nid in "abcde"}
    assert held == {"a": True, "b": True, "c": False, "d": True, "e": False}
    # One static run per kind, not per node: three kinds, three verdicts.
    assert len(placer.cache.by_shape) == 3
    groups = [[ns.node.id for ns in g] for g in placer.cache.shapes(inv)]
    assert sorted(groups) == [["a", "b", "d"], ["c"], ["e"]]


def test_gpu_kinds_count_every_eligible_node_of_a_kind() -> None:
    inv = Inventory.build(_snapshot())
    # a, b and d (one kind, three nodes) and c; e is not eligible.
    assert inv.facts.gpu_kinds == {(H100, 80.0): 24, (A100, 80.0): 8}
