"""Preemption rules of DESIGN.md section 6, one snapshot per rule."""

from __future__ import annotations

import heapq
from bisect import insort
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decide import decide
from scheduler.core.models import Snapshot, StopAction
from scheduler.core.simulate import apply_plan
from scheduler.core.sorted_groups import Sorted, merged

NOW = "2026-12-02T10:00:00Z"
LONG_AGO = "2026-12-02T08:00:00Z"


def _snapshot(
    models: list[dict[str, Any]], replicas: list[dict[str, Any]], **extra: Any
) -> Snapshot:
    gpus = [{"id": f"GPU-{i}", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80} for i in range(4)]
    return Snapshot.model_validate(
        {
            "now": NOW,
            "nodes": [{"id": "n1", "name": "n1", "cpu_cores": 64, "memory_gb": 512, "gpus": gpus}],
            "models": models,
            "replicas": replicas,
            # Every model is busy, so no stop below is a plain scale-down.
            "demand": {m["name"]: {"inflight": 10} for m in models},
            **extra,
        }
    )


def _model(name: str, cls: str, lo: int, owner: str = "org/a") -> dict[str, Any]:
    return {
        "name": name,
        "owner": owner,
        "class": cls,
        "scaling": {"min": lo, "max": 1},
        "profiles": [{"name": "tp4", "gpus": 4}],
    }


def _replica(rid: str, model: str, ready: str = LONG_AGO, **extra: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "model": model,
        "profile": "tp4",
        "state": "running",
        "created_at": LONG_AGO,
        "ready_at": ready,
        "shards": [{"node": "n1", "gpus": ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]}],
        **extra,
    }


def _stops(snap: Snapshot) -> list[StopAction]:
    return [a for a in decide(snap).actions if isinstance(a, StopAction)]


def test_a_lower_class_gives_way_and_its_model_is_held() -> None:
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [_replica("r-b", "batch")],
    )
    plan = decide(snap)
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    assert [(s.replica, s.preempted_for) for s in stops] == [("r-b", "chat")]
    assert plan.holds["batch"].for_ == "chat"
    assert plan.models["chat"].pending == "waiting for preempted replicas to stop"
    # No start on room that is still held by the victim.
    assert not [a for a in plan.actions if a.op == "start"]


def test_a_critical_minimum_is_never_taken() -> None:
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("other", "critical", 1)],
        [_replica("r-o", "other")],
    )
    assert _stops(snap) == []


def test_a_replica_inside_its_min_lifetime_is_spared() -> None:
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [_replica("r-b", "batch", ready="2026-12-02T09:59:00Z")],
    )
    assert _stops(snap) == []


def test_no_more_stops_while_victims_are_on_their_way_out() -> None:
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [_replica("r-b", "batch", state="stopping", preempted_for="chat")],
    )
    plan = decide(snap)
    assert _stops(snap) == []
    assert plan.models["chat"].pending == "waiting for preempted replicas to stop"


def test_a_replica_within_its_owners_guarantee_is_kept_from_another_owner() -> None:
    snap = _snapshot(
        [
            _model("chat", "critical", 1, owner="org/a"),
            _model("batch", "opportunistic", 0, owner="org/b"),
        ],
        [_replica("r-b", "batch")],
        quotas=[{"owner": "org/b", "guarantee": {"gpus": 4}}],
    )
    assert _stops(snap) == []


def test_max_victims_zero_disables_preemption() -> None:
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [_replica("r-b", "batch")],
        settings={"max_victims": 0},
    )
    assert _stops(snap) == []


def test_a_model_is_held_while_its_preempted_replica_stops_even_without_a_hold() -> None:
    # batch gave way to chat; its replica is still stopping and no hold is left (hold 0 s).
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [_replica("r-b", "batch", state="stopping", preempted_for="chat")],
        settings={"preempt_hold_s": 0},
    )
    plan = decide(snap)
    assert plan.actions == []
    assert plan.models["batch"].pending == "held while its replicas preempted for chat stop"
    assert plan.models["chat"].pending == "waiting for preempted replicas to stop"


def test_an_expired_hold_is_honoured_one_more_pass_then_dropped() -> None:
    # The victim is gone; chat has not placed yet: the room is chat's this pass.
    hold = {"batch": {"until": "2026-12-02T09:59:00Z", "for": "chat"}}
    snap = _snapshot(
        [_model("chat", "critical", 1), _model("batch", "opportunistic", 0)],
        [],
        holds=hold,
    )
    plan = decide(snap)
    assert [a.model for a in plan.actions if a.op == "start"] == ["chat"]
    assert plan.models["batch"].pending == "held one more pass after yielding to chat"
    assert plan.holds == {}  # not handed on: chat's victims are gone


def test_room_within_a_guarantee_goes_to_its_owner_before_a_higher_class_borrower() -> None:
    # chat (standard) would only borrow; batch's owner is guaranteed the room. Placing chat
    # first would have batch take it back next pass: a start, then a stop, for nothing.
    snap = _snapshot(
        [
            _model("chat", "standard", 0, owner="org/b"),
            _model("batch", "opportunistic", 0, owner="org/a"),
        ],
        [],
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 4}}],
    )
    plan = decide(snap)
    assert [a.model for a in plan.actions] == ["batch"]
    assert plan.models["chat"].pending is not None
    after = apply_plan(snap, plan, advance_s=60)
    assert decide(after).actions == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.floats(-1e6, 0), st.sampled_from([1.0, 2.0, 8.0]), st.just(0.0))),
        max_size=6,
    )
)
def test_the_victim_merge_is_heapq_merge(raw: list[list[tuple[float, float, float]]]) -> None:
    """The compiled merge of the victim groups yields what heapq.merge yields."""
    groups = [sorted((*t, f"r{g}-{i}") for i, t in enumerate(grp)) for g, grp in enumerate(raw)]
    lazy = []
    for group in groups:
        items = Sorted[tuple[float, float, float, str]]()
        for item in reversed(group):  # any order: a group is heaped when first read
            items.add(item)
        lazy.append(items)
    assert list(merged(lazy)) == list(heapq.merge(*groups))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 40), unique=True, max_size=30),
    st.lists(
        st.tuples(st.sampled_from(["at", "insert", "remove"]), st.integers(0, 60)), max_size=40
    ),
)
def test_a_lazily_sorted_group_reads_as_a_sorted_list(
    made: list[int], steps: list[tuple[str, int]]
) -> None:
    """The pool's groups (victims.Sorted), read, inserted into and removed from in any order
    (as the pool refiles a model's replicas mid-pass), read as a sorted list would."""
    group = Sorted[tuple[int]]()
    for x in made:
        group.add((x,))
    model = sorted((x,) for x in made)
    assert group.at(0) == (model[0] if model else None)  # heaped: what follows changes a heap
    for op, x in steps:
        if op == "at":
            assert group.at(x % 45) == (model[x % 45] if x % 45 < len(model) else None)
        elif op == "insert" and (x,) not in model:
            group.insert((x,))
            insort(model, (x,))
        elif op == "remove" and model:
            item = model.pop(x % len(model))
            group.remove(item)
        assert group.size() == len(model)
    assert [group.at(j) for j in range(len(model) + 1)] == [*model, None]


def test_two_replicas_of_one_id_are_ordered_as_victims() -> None:
    """Replica ids come from job meta, which an operator can copy: two replicas of one id,
    alike in all the victim order looks at, are still ordered (by age; the pool never compares
    its entries) and one of them gives way."""
    tp2 = [{"name": "tp2", "gpus": 2}]
    batch = {**_model("batch", "opportunistic", 0), "scaling": {"min": 0, "max": 2}}
    twins = [
        {**_replica("r-twin", "batch"), "profile": "tp2", "shards": [{"node": "n1", "gpus": g}]}
        for g in (["GPU-0", "GPU-1"], ["GPU-2", "GPU-3"])
    ]
    chat = {**_model("chat", "critical", 1), "profiles": tp2}
    plan = decide(_snapshot([chat, {**batch, "profiles": tp2}], twins))
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    assert [(s.replica, s.preempted_for) for s in stops] == [("r-twin", "chat")]
    assert plan.models["chat"].pending == "waiting for preempted replicas to stop"
