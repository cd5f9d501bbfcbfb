"""Room taken is room given (rule R5): the room preemption frees is kept for the model it was
taken for, in the pass that preempts and in the next ones, until that model starts there, no
longer needs it, or the bound passes. Hand-written cycles of three models on one or two nodes
that went round for ever while the freed room went to a third model."""

from __future__ import annotations

from typing import Any

from preemption_snapshots import live_per_model, model, node, replica, run, snap, starts, stops
from scenario_runs import apply_slow

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Snapshot
from scheduler.core.simulate import apply_plan

ZERO = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0, "max_victims": 3}
DEFAULT = {"eviction_grace_s": 300, "min_lifetime_s": 600, "preempt_hold_s": 300}


def preemptions(plans: list[Plan]) -> list[tuple[str, str]]:
    """(victim model, preemptor) of every preemption, in order."""
    return [(a.model, a.preempted_for) for p in plans for a in stops(p) if a.preempted_for]


def quiet_after(plans: list[Plan]) -> int:
    """The number of passes before the last one with an action (a fixed point after it)."""
    busy = [i for i, p in enumerate(plans) if p.actions]
    return busy[-1] + 1 if busy else 0


def freed_gpu_owed_to_a_third(settings: dict[str, Any]) -> Snapshot:
    # One node of 2 GPUs, one owner guaranteed 1 GPU. chat (critical, below its minimum)
    # preempts both replicas of batch (critical, above its minimum). Before: in the next pass
    # small (opportunistic), owed its owner's guarantee, placed first and took one freed GPU;
    # chat found no node with 2 free GPUs and preempted small; then batch, owed again, took
    # the room back, chat preempted it, and so on for ever, chat never starting.
    return snap(
        nodes=[node("n0", 2)],
        models=[
            model("chat", "critical", "org/a", lo=1, hi=1, gpus=2),
            model("batch", "critical", "org/a", hi=2),
            model("small", "opportunistic", "org/a", hi=1),
        ],
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 1}}],
        replicas=[
            replica("b0", "batch", [("n0", ["n0-g0"])]),
            replica("b1", "batch", [("n0", ["n0-g1"])]),
        ],
        settings=settings,
    )


def test_freed_gpus_go_to_the_model_they_were_taken_for_not_a_third_owed_one() -> None:
    for settings in (ZERO, DEFAULT):
        s = freed_gpu_owed_to_a_third(settings)
        after, plans = run(s, passes=30)
        assert preemptions(plans) == [("batch", "chat"), ("batch", "chat")], settings
        assert live_per_model(after) == {"chat": 1}, settings
        assert [a.model for a in starts(plans[1])] == ["chat"], settings
        assert quiet_after(plans) == 2, settings


def test_freed_gpus_are_kept_while_the_victims_take_a_pass_to_stop() -> None:
    # The victims stop one pass later (`stopping` in between): chat waits for them with the
    # room kept, and starts in the pass after they are gone.
    for settings in (ZERO, DEFAULT):
        s = freed_gpu_owed_to_a_third(settings)
        plans = []
        for _ in range(30):
            plans.append(decide(s))
            s = apply_slow(s, plans[-1], 60)
        assert preemptions(plans) == [("batch", "chat"), ("batch", "chat")], settings
        assert plans[1].models["chat"].pending_code == "waiting_for_victims", settings
        assert [a.model for a in starts(plans[2])] == ["chat"], settings
        assert live_per_model(s) == {"chat": 1} and quiet_after(plans) == 3, settings


def test_the_room_is_kept_in_the_plan_and_named_in_every_status() -> None:
    s = freed_gpu_owed_to_a_third(DEFAULT)
    first = decide(s)
    kept = first.reservations["chat"]
    assert [sh.gpus for r in kept for sh in r.shards] == [["n0-g0", "n0-g1"]]
    assert kept[0].until == s.now.replace(minute=5)  # preempt_hold_s after the preemption
    assert first.models["chat"].reserved == (
        "room kept for it on n0: n0-g0, n0-g1, preempted for it at 2026-12-02T10:00:00Z"
    )
    second = decide(apply_plan(s, first, 60))
    assert second.reservations == {}
    assert second.models["chat"].reserved == "room kept for it: its replica starts there"


KEPT = {
    "since": "2026-12-02T09:59:00Z",
    "until": "2026-12-02T10:04:00Z",
    "shards": [{"node": "n0", "gpus": ["n0-g0"], "cpu_cores": 4, "memory_gb": 16}],
    "quota": {"gpus": 1, "cpu_cores": 4, "memory_gb": 16},
}


def kept_for_a_held_model(**extra: Any) -> Snapshot:
    # chat preempted for n0-g0 a pass ago and has since yielded a replica of its own: held,
    # it does not grow in this pass, and small must not take its room meanwhile.
    return snap(
        nodes=[node("n0", 1)],
        models=[
            model("chat", "critical", "org/a"),
            model("small", "opportunistic", "org/a"),
            model("other", "critical", "org/a", gpus=2),  # fits nowhere: it stays short
        ],
        holds={"chat": {"until": "2026-12-02T10:03:00Z", "for": "other"}},
        **extra,
    )


def test_a_model_kept_off_reserved_room_says_whose_it_is() -> None:
    plan = decide(kept_for_a_held_model(reservations={"chat": [KEPT]}))
    assert starts(plan) == []
    small = plan.models["small"]
    assert small.pending_code == "preemption_held_back"
    assert small.pending is not None and small.pending.endswith(
        "held back: the room it would fit in is kept for chat "
        "(on n0: n0-g0, preempted for it at 2026-12-02T09:59:00Z)"
    )
    assert plan.reservations == {"chat": plan.reservations["chat"]}  # handed on: until ahead
    # Without the reservation the room is anyone's.
    assert [a.model for a in starts(decide(kept_for_a_held_model()))] == ["small"]


def test_room_is_released_once_its_model_no_longer_needs_it() -> None:
    s = kept_for_a_held_model(reservations={"chat": [KEPT]}, demand={"small": {"inflight": 9}})
    plan = decide(s)  # chat has no demand: it wants nothing
    assert [a.model for a in starts(plan)] == ["small"]
    assert plan.reservations == {}
    assert plan.models["chat"].reserved == "room kept for it released: it has what it asked for"


def test_room_is_released_once_its_bound_has_passed() -> None:
    s = kept_for_a_held_model(reservations={"chat": [KEPT]}, now="2026-12-02T10:04:00Z")
    plan = decide(s)  # honoured once more (no victims stop), not handed on
    assert starts(plan) == [] and plan.reservations == {}
    assert plan.models["chat"].reserved == (
        "room kept for it released: not started by 2026-12-02T10:04:00Z (preempt_hold_s) "
        "and the pass after its victims were gone"
    )
    assert decide(apply_plan(s, plan)).reservations == {}


def freed_quota_owed_to_a_third(settings: dict[str, Any]) -> Snapshot:
    # One owner may hold 2 GPUs and is guaranteed 1. chat (critical) needs 2 and
    # preempts std's two replicas for the quota. Before: in the next pass batch (lower class,
    # owed the guarantee) placed first and took the freed quota; chat preempted it, std took
    # it back, and so on.
    return snap(
        nodes=[node("n0", 2), node("n1", 2)],
        models=[
            model("chat", "critical", "org/a", lo=1, hi=1, gpus=2),
            model("std", "standard", "org/a", hi=2),
            model("batch", "opportunistic", "org/a", hi=1),
        ],
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 1}, "limit": {"gpus": 2}}],
        replicas=[
            replica("s0", "std", [("n0", ["n0-g0"])]),
            replica("s1", "std", [("n1", ["n1-g0"])]),
        ],
        settings=settings,
    )


def test_freed_quota_goes_to_the_model_it_was_taken_for() -> None:
    for settings in (ZERO, DEFAULT):
        after, plans = run(freed_quota_owed_to_a_third(settings), passes=30)
        assert preemptions(plans) == [("std", "chat"), ("std", "chat")], settings
        assert live_per_model(after) == {"chat": 1}, settings
        assert quiet_after(plans) == 2, settings


def test_room_is_released_when_its_model_places_elsewhere() -> None:
    # chat's room is on n1 (n1-g0); n0's one free GPU is the tighter fit, so chat starts
    # there and its room on n1 goes back to everyone.
    kept = {**KEPT, "shards": [{"node": "n1", "gpus": ["n1-g0"], "cpu_cores": 4}]}
    s = snap(
        nodes=[node("n0", 1), node("n1", 2)],
        models=[model("chat", "critical", "org/a")],
        reservations={"chat": [kept]},
    )
    plan = decide(s)
    assert [sh.node for a in starts(plan) for sh in a.shards] == ["n0"]
    assert plan.reservations == {}
    assert plan.models["chat"].reserved == "room kept for it released: it placed elsewhere"
