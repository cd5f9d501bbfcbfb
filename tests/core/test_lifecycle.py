"""Model lifecycle in the core (issue 16): rolling updates, moving back to a better profile,
locality of multi-node replicas, and GPU cost. Plan tests: snapshot in, plan out."""

from __future__ import annotations

from typing import Any

from scheduler.core.decide import decide
from scheduler.core.models import Plan, StartAction, StopAction
from scheduler.core.validate import parse_snapshot

NOW = "2026-12-02T10:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def _node(node_id: str, *, gpus: int = 2, model: str = H100, dc: str = "dc1", **meta: str):
    return {
        "id": node_id,
        "name": node_id,
        "datacenter": dc,
        "meta": meta,
        "address": f"10.0.0.{len(node_id)}",
        "cpu_cores": 64,
        "memory_gb": 512,
        "gpus": [{"id": f"{node_id}-g{i}", "model": model, "memory_gb": 80} for i in range(gpus)],
    }


def _rep(
    rid: str,
    node: str,
    *,
    state: str = "running",
    profile: str = "one",
    spec: str = "v1",
    created: str = "2026-12-02T08:00:00Z",
    gpu: int = 0,
) -> dict[str, Any]:
    return {
        "id": rid,
        "model": "m",
        "profile": profile,
        "state": state,
        "created_at": created,
        "ready_at": "2026-12-02T08:05:00Z" if state == "running" else None,
        "spec": spec,
        "shards": [{"node": node, "gpus": [f"{node}-g{gpu}"]}],
    }


def _model(want: int, profiles: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "owner": "org/a",
        "scaling": {"min": want, "max": want},
        "profiles": profiles or [{"name": "one", "gpus": 1, "cpu_cores": 4, "memory_gb": 16}],
        **extra,
    }


def _plan(nodes: list[dict], replicas: list[dict], model: dict, **snap: Any) -> Plan:
    body = {"now": NOW, "nodes": nodes, "models": [model], "replicas": replicas, **snap}
    # No scale-down window (issue 18): a fresh snapshot would keep every live replica for a
    # whole window, the replaced ones included (after a restart a roll-out waits that long).
    body["settings"] = {"scale_down_window_s": 0, **body.get("settings", {})}
    return decide(parse_snapshot(body))


def _stops(plan: Plan) -> dict[str, str]:
    return {a.replica: a.reason for a in plan.actions if isinstance(a, StopAction)}


def _starts(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


# ---------------------------------------------------------------- rolling update


def test_rolling_update_replaces_one_at_a_time_make_before_break() -> None:
    nodes = [_node("n1", gpus=5)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(3)]
    # 1. One replacement starts; every old replica still serves.
    plan = _plan(nodes, old, _model(3), specs=specs)
    assert _stops(plan) == {}
    assert len(_starts(plan)) == 1
    progress = plan.models["m"].rollout or ""
    assert "0 on the new spec, 3 on the previous, 1 being replaced" in progress
    new = {**_rep("r-new", "n1", state="starting", spec="v2", gpu=3), "created_at": NOW}
    # 2. While it starts nothing more happens: no second replacement (surge 1), no stop.
    plan = _plan(nodes, [*old, new], _model(3), specs=specs)
    assert plan.actions == []
    # 3. Once it runs, the oldest old replica stops and the next replacement starts.
    running = {**new, "state": "running", "ready_at": NOW}
    plan = _plan(nodes, [*old, running], _model(3), specs=specs)
    assert _stops(plan) == {"r-0": "rolling update: replaced by a replica on the model's new spec"}
    assert len(_starts(plan)) == 1
    # The same replicas on the current spec: nothing to do.
    assert _plan(nodes, old, _model(3), specs={"m": {"one": "v1"}}).actions == []
    # A replica whose spec is unknown (a job from before digests) is never rolled.
    unknown = [{**r, "spec": ""} for r in old]
    assert _plan(nodes, unknown, _model(3), specs=specs).actions == []


def test_rolling_update_surge_setting_and_never_below_desired_live() -> None:
    nodes = [_node("n1", gpus=8)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(4)]
    plan = _plan(nodes, old, _model(4), specs=specs, settings={"rollout_surge": 2})
    assert len(_starts(plan)) == 2 and _stops(plan) == {}
    # Without room for a replacement the old replicas keep serving, and status says why.
    full = [_node("n1", gpus=4)]
    plan = _plan(full, old, _model(4), specs=specs)
    assert _stops(plan) == {} and _starts(plan) == []
    assert plan.models["m"].pending is not None
    assert plan.models["m"].rollout is not None


def test_a_replacement_that_does_not_become_ready_stops_the_roll_out() -> None:
    nodes = [_node("n1", gpus=4)]
    specs = {"m": {"one": "v2"}}
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(2)]
    stuck = {
        **_rep("r-new", "n1", state="starting", spec="v2", gpu=3),
        "created_at": "2026-12-02T09:00:00Z",
    }
    plan = _plan(nodes, [*old, stuck], _model(2, load_grace_s=600), specs=specs)
    assert set(_stops(plan)) == {"r-new"}  # the old replicas stay
    assert plan.stalled == {"m": "v2"}
    assert "roll-out stopped" in (plan.models["m"].rollout or "")
    # Next pass, with the failure handed on: no new replacement, old replicas kept.
    gone = {**stuck, "state": "stopping"}
    plan = _plan(nodes, [*old, gone], _model(2, load_grace_s=600), specs=specs, stalled={"m": "v2"})
    assert plan.actions == [] and plan.stalled == {"m": "v2"}
    assert "roll-out stopped" in (plan.models["m"].rollout or "")
    # A new change (v3) rolls again, and the failure is forgotten.
    plan = _plan(nodes, old, _model(2), specs={"m": {"one": "v3"}}, stalled={"m": "v2"})
    assert len(_starts(plan)) == 1 and plan.stalled == {}


def test_a_replica_on_a_profile_the_model_dropped_is_rolled() -> None:
    nodes = [_node("n1", gpus=4)]
    gone_profile = [_rep("r-0", "n1", profile="old")]
    plan = _plan(nodes, gone_profile, _model(1), specs={"m": {"one": "v1"}})
    assert [a.profile for a in _starts(plan)] == ["one"] and _stops(plan) == {}


# ---------------------------------------------------------------- consolidation

TWO_PROFILES = [
    {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
    {"name": "a100", "gpus": 1, "gpu_models": ["A100"]},
]


def test_a_replica_on_its_second_profile_moves_back_when_the_first_fits() -> None:
    nodes = [_node("h", gpus=1), _node("a", gpus=1, model=A100)]
    fallback = [_rep("r-a", "a", profile="a100")]
    plan = _plan(nodes, fallback, _model(1, TWO_PROFILES))
    starts = _starts(plan)
    assert [(s.profile, s.shards[0].node) for s in starts] == [("h100", "h")]
    assert _stops(plan) == {}  # make-before-break: the old one serves until the new runs
    new = {**_rep("r-h", "h", profile="h100", state="starting"), "created_at": NOW}
    plan = _plan(nodes, [*fallback, new], _model(1, TWO_PROFILES))
    assert plan.actions == []
    running = {**new, "state": "running"}
    plan = _plan(nodes, [*fallback, running], _model(1, TWO_PROFILES))
    assert _stops(plan) == {"r-a": "consolidation: replaced by a replica on a better placement"}
    assert _starts(plan) == []


def test_consolidation_never_churns_and_is_rate_limited() -> None:
    nodes = [_node("h", gpus=1), _node("a", gpus=1, model=A100)]
    fallback = [_rep("r-a", "a", profile="a100")]
    # Just ready (within min_lifetime_s): left alone.
    fresh = [{**fallback[0], "ready_at": "2026-12-02T09:59:00Z"}]
    assert _plan(nodes, fresh, _model(1, TWO_PROFILES)).actions == []
    # No room on the preferred profile: nothing (never by preemption).
    busy = [_node("h", gpus=0), _node("a", gpus=1, model=A100)]
    assert _plan(busy, fallback, _model(1, TWO_PROFILES)).actions == []
    # Turned off.
    off = _plan(nodes, fallback, _model(1, TWO_PROFILES), settings={"consolidate_per_pass": 0})
    assert off.actions == []
    # On the preferred profile already: never moved to the other.
    home = [_rep("r-h", "h", profile="h100")]
    assert _plan(nodes, home, _model(1, TWO_PROFILES)).actions == []
    # Two models' worth of moves, one per pass.
    nodes4 = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    two = [_rep("r-a0", "a", profile="a100"), _rep("r-a1", "a", profile="a100", gpu=1)]
    plan = _plan(nodes4, two, _model(2, TWO_PROFILES))
    assert len(_starts(plan)) == 1 and _stops(plan) == {}


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


def _simulate(
    nodes: list[dict], replicas: list[dict], model: dict, passes: int, **snap: Any
) -> list[Plan]:
    """Run passes as the service would: a start is `starting` in the next pass and `running`
    in the one after (with the current spec); a stop is gone by the next pass. Failed
    roll-outs and moves are handed on as the loop hands them on."""
    specs = snap.get("specs", {})
    plans: list[Plan] = []
    reps = [dict(r) for r in replicas]
    moves: dict[str, str] = {}
    for _ in range(passes):
        plan = _plan(nodes, reps, model, moves=moves, **snap)
        plans.append(plan)
        moves = dict(plan.moves)
        gone = set(_stops(plan))
        reps = [
            {**r, "state": "running", "ready_at": "2026-12-02T08:00:00Z"}
            if r["state"] == "starting"
            else r
            for r in reps
            if r["id"] not in gone
        ]
        for a in _starts(plan):
            reps.append(
                {
                    "id": a.replica, "model": "m", "profile": a.profile, "state": "starting",
                    "created_at": NOW, "spec": specs.get("m", {}).get(a.profile, ""),
                    "shards": [s.model_dump() for s in a.shards],
                }
            )  # fmt: skip
        running = sum(1 for r in reps if r["state"] == "running")
        assert running >= model["scaling"]["min"], f"fewer than min running after {plan}"
    return plans


def test_a_whole_roll_out_converges_never_below_min_and_then_rests() -> None:
    nodes = [_node("n1", gpus=4), _node("n2", gpus=4)]
    old = [_rep(f"r-{i}", "n1", gpu=i) for i in range(4)]
    plans = _simulate(nodes, old, _model(4), 12, specs={"m": {"one": "v2"}})
    final = plans[-1]
    assert final.actions == [] and final.models["m"].rollout is None
    started = sum(len(_starts(p)) for p in plans)
    stopped = sum(len(_stops(p)) for p in plans)
    assert started == 4 and stopped == 4  # each replica replaced exactly once: no churn
    assert all(len(_starts(p)) <= 1 for p in plans)  # surge 1


def test_consolidation_converges_without_churn() -> None:
    nodes = [_node("h", gpus=2), _node("a", gpus=2, model=A100)]
    fallback = [_rep("r-a0", "a", profile="a100"), _rep("r-a1", "a", profile="a100", gpu=1)]
    plans = _simulate(nodes, fallback, _model(2, TWO_PROFILES), 10)
    assert plans[-1].actions == []
    assert sum(len(_starts(p)) for p in plans) == 2  # each moved once, never back
