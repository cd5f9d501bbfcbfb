"""Why a feasible preemption was held back (max_victims, min_lifetime_s, room kept for
another model), as the pending sentence says it."""

from __future__ import annotations

from preemption_snapshots import (
    LONG_AGO,
    live_per_model,
    model,
    node,
    replica,
    run,
    snap,
    stops,
)

from scheduler.core.decide import decide
from scheduler.core.models import Snapshot


def test_pending_says_when_max_victims_held_a_preemption_back() -> None:
    # Four 1-GPU opportunistic replicas fill the node; the critical model needs all 4 GPUs.
    s = snap(
        nodes=[node("n1", 4)],
        settings={"max_victims": 3},
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=4),
            model("small", "opportunistic", "org/b", hi=4),
        ],
        replicas=[replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])]) for i in range(4)],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 4}},
    )
    plan = decide(s)
    assert stops(plan) == []
    pending = plan.models["crit"].pending
    assert pending is not None
    assert pending.endswith("preempting would take up to 4 replicas, more than max_victims (3)")


def _young_victims(ready: list[str]) -> Snapshot:
    # One 2-GPU node full of opportunistic 1-GPU replicas ready at `ready`; a critical model
    # needs both GPUs. Default settings: min_lifetime_s 600, max_victims 3.
    return snap(
        nodes=[node("n1", 2)],
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=2),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[
            replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])], ready_at=at)
            for i, at in enumerate(ready)
        ],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 2}},
    )


def test_pending_says_when_min_lifetime_held_a_preemption_back() -> None:
    # Both replicas that would make room became ready 5 and 2 minutes ago: nothing is
    # preempted, and pending names the rule, how many and from when.
    s = _young_victims(["2026-12-02T09:55:00Z", "2026-12-02T09:58:00Z"])
    plan = decide(s)
    assert stops(plan) == []
    pending = plan.models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 2 replicas that would make room became ready less than "
        "min_lifetime_s (600 s) ago; they may give way from 2026-12-02T10:08:00Z"
    ), pending
    # And it is true: at 10:08 (not before) they are preempted and crit starts.
    after, plans = run(s, passes=12, advance_s=60)
    first = next(i for i, p in enumerate(plans) if stops(p))
    assert first == 8  # 10:08:00
    assert [a.preempted_for for a in stops(plans[first])] == ["crit", "crit"]
    assert live_per_model(after) == {"crit": 1}


def test_min_lifetime_pending_counts_only_the_young_victims_needed() -> None:
    s = _young_victims([LONG_AGO, "2026-12-02T09:58:00Z"])
    pending = decide(s).models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 1 replica that would make room became ready less than "
        "min_lifetime_s (600 s) ago; it may give way from 2026-12-02T10:08:00Z"
    ), pending


def test_min_lifetime_pending_names_no_more_young_victims_than_needed() -> None:
    # Three young 1-GPU replicas fill the node; crit needs one GPU: one of them would do.
    s = snap(
        nodes=[node("n1", 3)],
        models=[
            model("crit", "critical", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=3),
        ],
        replicas=[
            replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])], ready_at="2026-12-02T09:58:00Z")
            for i in range(3)
        ],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 3}},
    )
    pending = decide(s).models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 1 replica that would make room became ready less than "
        "min_lifetime_s (600 s) ago; it may give way from 2026-12-02T10:08:00Z"
    ), pending


def test_no_held_back_sentence_when_young_victims_would_not_make_room_either() -> None:
    # The young replicas are a critical model's minimum: never victims, whatever their age,
    # so min_lifetime_s is not what holds crit back.
    s = _young_victims(["2026-12-02T09:55:00Z", "2026-12-02T09:58:00Z"])
    data = s.model_dump(by_alias=True, mode="json")
    data["models"][1]["class"] = "critical"
    data["models"][1]["scaling"]["min"] = 2
    pending = decide(Snapshot.model_validate(data)).models["crit"].pending
    assert pending is not None and "held back" not in pending


def test_pending_says_when_the_room_is_kept_for_another_models_preemption() -> None:
    # big (critical, 2 GPUs) preempted both replicas on n1; they are still stopping. chat
    # (standard, 1 GPU) would fit in their room, but that room is big's.
    s = snap(
        nodes=[node("n1", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
            model("opp", "opportunistic", "org/a", lo=1),
        ],
        replicas=[
            replica(
                f"r-{i}", "small", [("n1", [f"n1-g{i}"])], state="stopping", preempted_for="big"
            )
            for i in range(2)
        ],
        holds={"small": {"until": "2026-12-02T10:04:00Z", "for": "big"}},
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}, "opp": {"inflight": 1}},
    )
    plan = decide(s)
    assert plan.actions == []
    assert plan.models["big"].pending == "waiting for preempted replicas to stop"
    pending = plan.models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it still stopping)"
    ), pending
    # opp (opportunistic) could never have taken an opportunistic replica's room: no claim.
    opp = plan.models["opp"].pending
    assert opp is not None and "held back" not in opp


def test_room_stopping_for_a_model_that_has_what_it_wants_is_kept_for_nobody() -> None:
    # As above, but big runs on n2 already (it wants one): the room stopping on n1 is free
    # for whoever comes once it is gone, so no "kept for big".
    stopping = {"state": "stopping", "preempted_for": "big"}
    s = snap(
        nodes=[node("n1", 2), node("n2", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[
            replica("r-0", "small", [("n1", ["n1-g0"])], **stopping),
            replica("r-1", "small", [("n1", ["n1-g1"])], **stopping),
            replica("r-big", "big", [("n2", ["n2-g0", "n2-g1"])]),
        ],
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}},
    )
    pending = decide(s).models["chat"].pending
    assert pending is not None and "held back" not in pending, pending


def test_held_back_names_the_model_whose_room_would_do() -> None:
    # Replicas are stopping for two models: for big on n1 (2 GPUs), for one on n2 (1 GPU).
    # chat needs 2 GPUs: only big's room would do, and only big is named.
    stopping = {"state": "stopping"}
    s = snap(
        nodes=[node("n1", 2), node("n2", 1)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("one", "critical", "org/a", lo=1),
            model("chat", "standard", "org/a", lo=1, gpus=2),
            model("small", "opportunistic", "org/b", hi=3),
        ],
        replicas=[
            replica("r-0", "small", [("n1", ["n1-g0"])], **stopping, preempted_for="big"),
            replica("r-1", "small", [("n1", ["n1-g1"])], **stopping, preempted_for="big"),
            replica("r-2", "small", [("n2", ["n2-g0"])], **stopping, preempted_for="one"),
        ],
        demand={"big": {"inflight": 1}, "one": {"inflight": 1}, "chat": {"inflight": 1}},
    )
    pending = decide(s).models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it still stopping)"
    ), pending


def test_pending_says_when_the_room_went_to_a_preemption_in_the_same_pass() -> None:
    # Both models are missing; big (critical) preempts both opportunistic replicas first.
    # chat (standard) could have preempted one of them, but they are big's now.
    s = snap(
        nodes=[node("n1", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])]) for i in range(2)],
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}, "small": {"inflight": 2}},
    )
    plan = decide(s)
    assert sorted((a.replica, a.preempted_for) for a in stops(plan)) == [
        ("r-0", "big"),
        ("r-1", "big"),
    ]
    pending = plan.models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it in this pass)"
    ), pending
