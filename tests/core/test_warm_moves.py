"""Warm targets for roll-outs, drains, consolidation and defragmentation; victims whose model
is warm elsewhere; weights left where a replica stopped (rules W3-W5)."""

from __future__ import annotations

from typing import Any

import preemption_snapshots as hand
from test_warm_placement import LONG_AGO, cache, filler, model, node, snapshot, started_on

from scheduler.core.decide import decide
from scheduler.core.models import Snapshot, StopAction
from scheduler.core.pass_state import PassState
from scheduler.core.plugins import Plugins
from scheduler.core.simulate import apply_plan


def running(rid: str, name: str, nid: str, gpu: int = 0, **extra: Any) -> dict[str, Any]:
    """A replica on one GPU of one node, ready long ago."""
    return hand.replica(rid, name, [(nid, [f"{nid}-g{gpu}"])], **extra)


def _three(warm_on: str, source: str = "org/m", **first: Any) -> list[dict[str, Any]]:
    """n0 holds the replica being replaced; n1 is the tighter fit (6 GPUs in use), n2 the
    emptier one (4 in use); the cache holding `source` is on `warm_on`."""
    nodes = [node("n0", **first), node("n1"), node("n2")]
    for n in nodes:
        if n["id"] == warm_on:
            n["cache"] = cache(source)
    return nodes


def _fill() -> list[dict[str, Any]]:
    return [running(f"f1-{i}", "fill", "n1", i) for i in range(1, 7)] + [
        running(f"f2-{i}", "fill", "n2", i) for i in range(1, 5)
    ]


def test_a_roll_out_to_a_new_revision_starts_where_that_revision_is_cached() -> None:
    """The catalog moved m to revision v2: the replacement goes where v2 is cached, not
    where the revision it replaces is."""
    old = running("r-old", "m", "n0", spec="v1")
    for cached_revision, expect in (("v2", "n2"), ("main", "n1")):
        nodes = _three("n2")
        nodes[2]["cache"]["snapshots"][0]["revisions"] = [cached_revision]
        body = {"replicas": [old, *_fill()], "specs": {"m": {"p": "v2"}}}
        plan = decide(snapshot(nodes, [model("m", revision="v2")], **body))
        assert started_on(plan) == [expect], cached_revision


def test_a_replica_on_a_draining_node_is_replaced_on_a_warm_node() -> None:
    """n0 (draining, and the tightest fit were it eligible) holds m's weights too: a warm node
    that may take nothing new is never chosen."""
    for warm_on, expect in (("n2", "n2"), ("n0", "n1")):
        nodes = _three(warm_on, gpus=2)
        nodes[0].update(draining=True, eligible=False)
        plan = decide(snapshot(nodes, [model("m")], replicas=[running("r", "m", "n0"), *_fill()]))
        assert started_on(plan) == [expect], warm_on


def test_consolidation_moves_to_a_warm_node() -> None:
    """m runs on its second profile (A100); the first (H100) fits on n1 (tighter) and n2."""
    for warm_on, expect in (("n2", "n2"), ("n0", "n1")):
        nodes = _three(warm_on)
        nodes[0]["gpus"] = [{"id": "n0-g0", "model": "NVIDIA A100-SXM4-80GB", "memory_gb": 80}]
        m = model("m")
        m["profiles"] = [
            {"name": "h", "gpus": 1, "gpu_models": ["H100"], "cpu_cores": 1, "memory_gb": 1},
            {"name": "p", "gpus": 1, "gpu_models": ["A100"], "cpu_cores": 1, "memory_gb": 1},
        ]
        plan = decide(snapshot(nodes, [m], replicas=[running("r", "m", "n0"), *_fill()]))
        assert started_on(plan) == [expect], warm_on


def test_of_equally_cheap_victims_the_one_warm_elsewhere_gives_way() -> None:
    """c (critical) needs a GPU; a and b (opportunistic) cost the same to stop: by id a would
    go. With b's weights cached on n3 (full), b goes: it can start warm again elsewhere."""

    def victim(warm_b: bool) -> list[str]:
        n3 = {**hand.node("n3", 1), "cache": cache("org/b") if warm_b else None}
        models = [hand.model(n, "opportunistic", "org/x") for n in ("a", "b", "z")]
        models = [{**m, "serve": {"source": f"org/{m['name']}"}} for m in models]
        s = hand.snap(
            nodes=[hand.node("n1", 1), hand.node("n2", 1), n3],
            models=[*models, hand.model("c", "critical", "org/y", lo=1)],
            replicas=[
                hand.replica("r-a", "a", [("n1", ["n1-g0"])]),
                hand.replica("r-b", "b", [("n2", ["n2-g0"])]),
                hand.replica("r-z", "z", [("n3", ["n3-g0"])]),
            ],
        )
        return sorted(a.replica for a in hand.stops(decide(s)))

    assert victim(False) == ["r-a"]
    assert victim(True) == ["r-b"]


def test_a_model_scaled_to_zero_keeps_its_weights_and_comes_back_warm() -> None:
    """Nothing in the core deletes weights: the plan that stops m's last replica leaves n2's
    cache as it was, and when demand returns m starts on n2 again, not on the tighter n1."""
    nodes = _three("n2")
    m = {**model("m", want=0), "scaling": {"min": 0, "max": 1, "on_demand": True}}
    on_n2 = running("r", "m", "n2", 0, last_used_at=LONG_AGO)
    s = snapshot(nodes, [m], replicas=[on_n2, *_fill()], settings={"eviction_grace_s": 60})
    plan = decide(s)
    assert [a.replica for a in plan.actions if isinstance(a, StopAction)] == ["r"]
    after = apply_plan(s, plan, 60)
    after = apply_plan(after, decide(after), 60)  # the stop is gone
    assert [n.cache for n in after.nodes] == [n.cache for n in s.nodes]
    back = Snapshot.model_validate(
        {**after.model_dump(mode="json", by_alias=True), "demand": {"m": {"inflight": 5}}}
    )
    assert started_on(decide(back)) == ["n2"]


def test_no_victim_search_where_the_cache_lacks_room_for_the_weights() -> None:
    """Rule W2's "no" stands whatever is stopped, though the placing walk met "no free GPU"
    first on a full node: preemption could help only where the cache has room."""
    nodes = [
        node("short", gpus=1, cached=cache("org/x", free_gb=1)),
        node("roomy", gpus=1, cached=cache("org/x", free_gb=100)),
    ]
    fill = filler("short", 1) + filler("roomy", 1)
    st = PassState(snapshot(nodes, [model("m", weights_gb=16.0)], replicas=fill), Plugins())
    m = st.model("m")
    assert m is not None
    assert st.placer.place(m, st.inv).placement is None
    could = {
        nid: st.placer.preemption_could_help(m, m.profiles[0], ns, st.inv.version)
        for nid, ns in st.inv.nodes.items()
    }
    assert could == {"short": False, "roomy": True}
