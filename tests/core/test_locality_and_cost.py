"""Locality of multi-node replicas, placement by GPU cost, and defragmentation. Plan tests:
snapshot in, plan out."""

from __future__ import annotations

from typing import Any

from lifecycle_snapshots import A100, NOW, _model, _node, _plan, _rep, _starts, _stops

from scheduler.core.decide import decide
from scheduler.core.models import Plan
from scheduler.core.validate import parse_snapshot

# ---------------------------------------------------------------- locality

MULTI = [{"name": "2x4", "gpus": 4, "shards": 2, "locality": "preferred"}]


def _multi_plan(nodes: list[dict], locality: str = "preferred") -> Plan:
    profiles = [{**MULTI[0], "locality": locality}]
    return _plan(nodes, [], _model(1, profiles))


def test_multi_node_shards_go_to_one_datacenter_then_one_rack() -> None:
    # dc1 has one free node, dc2 two: the replica goes to dc2 whole.
    nodes = [
        _node("a-dc1", gpus=8, dc="dc1"),
        _node("b-dc2", gpus=4, dc="dc2"),
        _node("c-dc2", gpus=4, dc="dc2"),
    ]
    (start,) = _starts(_multi_plan(nodes))
    assert {s.node for s in start.shards} == {"b-dc2", "c-dc2"}
    # Within one datacenter, two nodes of one rack beat two of different racks.
    racks = [
        _node("a", gpus=8, rack="r1"),
        _node("b", gpus=8, rack="r2"),
        _node("c", gpus=4, rack="r2"),
    ]
    (start,) = _starts(_multi_plan(racks))
    assert {s.node for s in start.shards} == {"b", "c"}


def test_required_locality_waits_and_preferred_falls_back() -> None:
    split = [_node("a", gpus=4, dc="dc1"), _node("b", gpus=4, dc="dc2")]
    plan = _multi_plan(split, "required")
    assert _starts(plan) == [] and plan.models["m"].pending is not None
    (start,) = _starts(_multi_plan(split, "preferred"))
    assert {s.node for s in start.shards} == {"a", "b"}


def test_required_localitys_pending_names_what_is_short() -> None:
    # Three nodes have 4 free GPUs each: what is short is a datacenter holding two of them.
    dcs = [_node(n, gpus=4, dc=f"dc{i}") for i, n in enumerate("abc")]
    pending = _multi_plan(dcs, "required").models["m"].pending
    assert pending == (
        "profile 2x4: 3 nodes have 4 free GPUs, but no more than 1 in one datacenter, "
        "where `locality: required` puts all 2 shards"
    )
    # One datacenter, three racks (and a node too small): a rack holding two of them.
    racks = [*(_node(n, gpus=4, rack=f"r{i}") for i, n in enumerate("abc")), _node("d", rack="r0")]
    pending = _multi_plan(racks, "required").models["m"].pending
    assert pending == (
        "profile 2x4: 3 nodes have 4 free GPUs, but no more than 1 in one rack of a "
        "datacenter, where `locality: required` puts all 2 shards (too few free GPUs on 1 node)"
    )
    # Too few such nodes at all: the free GPUs per node are what is short.
    few = [_node("a", gpus=4, rack="r0"), _node("b", rack="r0")]
    pending = _multi_plan(few, "required").models["m"].pending
    assert pending == (
        "profile 2x4: only 1 of 2 distinct nodes have 4 free GPUs (too few free GPUs on 1 node)"
    )


# ---------------------------------------------------------------- cost

CHEAP = [
    {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
    {"name": "a100x2", "gpus": 2, "gpu_models": ["A100"]},
]


def test_cheapest_picks_the_cheapest_feasible_profile() -> None:
    nodes = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    costs = {"gpu_costs": {"H100": 4.0, "A100": 1.5}}
    (start,) = _starts(_plan(nodes, [], _model(1, CHEAP, placement="cheapest"), settings=costs))
    assert start.profile == "a100x2"  # 3.0 beats 4.0 although listed second
    # Preferred (the default) keeps listed order whatever the cost.
    (start,) = _starts(_plan(nodes, [], _model(1, CHEAP), settings=costs))
    assert start.profile == "h100"
    # Only among feasible ones: no A100 free, the dearer H100 serves.
    no_a100 = [_node("h", gpus=2)]
    (start,) = _starts(_plan(no_a100, [], _model(1, CHEAP, placement="cheapest"), settings=costs))
    assert start.profile == "h100"
    # A longer key wins over a shorter one it contains.
    dear_a100 = {"gpu_costs": {"H100": 4.0, "A100": 1.5, "A100-SXM4": 3.0}}
    plan = _plan(nodes, [], _model(1, CHEAP, placement="cheapest"), settings=dear_a100)
    assert _starts(plan)[0].profile == "h100"


def test_a_cheapest_model_moves_to_a_cheaper_placement_when_it_frees() -> None:
    nodes = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    costs = {"gpu_costs": {"H100": 4.0, "A100": 1.5}}
    on_h100 = [_rep("r-h", "h", profile="h100")]
    plan = _plan(nodes, on_h100, _model(1, CHEAP, placement="cheapest"), settings=costs)
    assert [s.profile for s in _starts(plan)] == ["a100x2"]
    # Already on the cheapest: stays.
    on_a100 = [
        {**_rep("r-a", "a", profile="a100x2"), "shards": [{"node": "a", "gpus": ["a-g0", "a-g1"]}]}
    ]
    plan = _plan(nodes, on_a100, _model(1, CHEAP, placement="cheapest"), settings=costs)
    assert plan.actions == []


def test_a_refused_replacement_goes_and_the_old_replica_stays() -> None:
    """The builder marks the roll-out stalled when Nomad refused the replacement: the plan
    stops the replacement (not the old replica, whatever their creation times)."""
    nodes = [_node("n1", gpus=2)]
    old = _rep("r-b", "n1", created=NOW)
    refused = {**_rep("r-a", "n1", state="starting", spec="v2", gpu=1), "created_at": NOW}
    plan = _plan(nodes, [old, refused], _model(1), specs={"m": {"one": "v2"}}, stalled={"m": "v2"})
    assert set(_stops(plan)) == {"r-a"} and _starts(plan) == []


def _two_models(nodes: list[dict], replicas: list[dict], **snap: Any) -> Plan:
    small = {**_model(2), "name": "small"}
    big = {**_model(1, [{"name": "tp4", "gpus": 4}]), "name": "big"}
    body = {"now": NOW, "nodes": nodes, "models": [small, big], "replicas": replicas, **snap}
    body["settings"] = {"scale_down_window_s": 0, **body.get("settings", {})}
    return decide(parse_snapshot(body))


def test_a_small_replica_fragmenting_a_node_is_moved_so_a_large_one_fits() -> None:
    """No node has 4 free GPUs because each holds one 1-GPU replica; the small model's
    replica is moved (make-before-break) to a node the large one could not use anyway."""
    nodes = [_node("n1", gpus=4), _node("n2", gpus=4), _node("n3", gpus=1)]
    small = [
        {**_rep("s1", "n1"), "model": "small"},
        {**_rep("s2", "n2"), "model": "small"},
    ]
    plan = _two_models(nodes, small)
    (start,) = _starts(plan)
    assert start.model == "small" and start.shards[0].node == "n3"
    assert _stops(plan) == {}  # the moved replica serves until its replacement runs
    moved = next(iter(plan.moves))
    assert plan.moves == {moved: start.replica}
    assert plan.models["big"].pending is not None
    # Its replacement starting: nothing more.
    new = {**_rep(start.replica, "n3", state="starting"), "model": "small", "created_at": NOW}
    plan = _two_models(nodes, [*small, new], moves={moved: start.replica})
    assert plan.actions == [] and plan.moves == {moved: start.replica}
    # Running: the moved one stops; once it is gone the large model takes its node whole.
    running = {**new, "state": "running"}
    plan = _two_models(nodes, [*small, running], moves={moved: start.replica})
    assert _stops(plan) == {moved: "consolidation: replaced by a replica on a better placement"}
    rest = [r for r in small if r["id"] != moved]
    plan = _two_models(nodes, [*rest, running])
    (start,) = _starts(plan)
    assert start.model == "big" and start.shards[0].node == ("n1" if moved == "s1" else "n2")


def test_no_defragmentation_without_room_elsewhere_or_for_a_settling_replica() -> None:
    # Packing both small replicas on one node frees the other: a move (next test's setup).
    nodes = [_node("n1", gpus=4), _node("n2", gpus=4)]
    small = [{**_rep("s1", "n1"), "model": "small"}, {**_rep("s2", "n2"), "model": "small"}]
    assert [a.shards[0].node for a in _starts(_two_models(nodes, small))] == ["n2"]
    # No room elsewhere (n2's other GPUs are another job's): nothing moves.
    busy = [_node("n1", gpus=4), {**_node("n2", gpus=4), "held": ["n2-g1", "n2-g2", "n2-g3"]}]
    assert _two_models(busy, small).actions == []
    nodes3 = [*nodes, _node("n3", gpus=1)]
    fresh = [{**r, "ready_at": "2026-12-02T09:59:00Z"} for r in small]
    assert _two_models(nodes3, fresh).actions == []  # ready less than min_lifetime_s ago


def test_cheapest_picks_the_cheapest_gpu_type_within_one_profile() -> None:
    """A profile that runs on any GPU: bin-packing alone takes the tightest node (one H100);
    `cheapest` takes the A100s, whatever the node order."""
    nodes = [_node("h", gpus=1), _node("a", gpus=2, model=A100)]
    costs = {"gpu_costs": {"H100": 4.0, "A100": 1.5}}
    anywhere = [{"name": "any", "gpus": 1}]
    (start,) = _starts(_plan(nodes, [], _model(1, anywhere), settings=costs))
    assert start.shards[0].node == "h"  # preferred: tightest fit
    plan = _plan(nodes, [], _model(1, anywhere, placement="cheapest"), settings=costs)
    (start,) = _starts(plan)
    assert (start.profile, start.shards[0].node) == ("any", "a")
    listed = [{"name": "two", "gpus": 1, "gpu_models": ["H100", "A100"]}]
    plan = _plan(nodes, [], _model(1, listed, placement="cheapest"), settings=costs)
    assert _starts(plan)[0].shards[0].node == "a"
