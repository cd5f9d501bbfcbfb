"""Reclaim toward weighted fair share (rules F3, R7): an owner below its fair share takes back
borrowed replicas of owners above theirs, only while that lowers the larger share."""

from __future__ import annotations

from preemption_snapshots import live_per_model, model, node, replica, run, snap, stops

from scheduler.core.models import Snapshot


def _late_owner(weight_b: float = 1.0, n: int = 6) -> Snapshot:
    # org/a borrowed every GPU of the node before org/b asked for anything; both are
    # guaranteed 1 GPU and want all 6.
    reps = [replica(f"r-a{i}", "a-chat", [("n1", [f"n1-g{i}"])]) for i in range(n)]
    return snap(
        nodes=[node("n1", n)],
        models=[
            model("a-chat", "standard", "org/a", hi=n),
            model("b-chat", "standard", "org/b", hi=n),
        ],
        replicas=reps,
        quotas=[
            {"owner": "org/a", "guarantee": {"gpus": 1}},
            {"owner": "org/b", "guarantee": {"gpus": 1}, "weight": weight_b},
        ],
    )


def test_a_late_owner_reclaims_up_to_its_fair_share() -> None:
    # Before: org/b reclaimed its guarantee (1 GPU) and nothing more, org/a kept 5.
    after, _ = run(_late_owner(), passes=16)
    assert live_per_model(after) == {"a-chat": 3, "b-chat": 3}
    # Then quiet: nobody takes it back.
    _, later = run(after, passes=8)
    assert all(not p.actions for p in later)


def test_the_weighted_fair_share_is_reclaimed() -> None:
    # org/b weighs 3: of the 4 GPUs past the guarantees it is owed 3, org/a 1.
    after, _ = run(_late_owner(weight_b=3.0), passes=16)
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 4}


def test_a_fair_share_stop_names_its_rule_and_the_share() -> None:
    # The guarantee is reclaimed first (one pass), then the share, one stop per replica short.
    _, plans = run(_late_owner(), passes=8)
    fair = [a for p in plans for a in stops(p) if a.code == "preempted_fair_share"]
    assert fair, "no stop toward fair share"
    assert fair[0].preempted_for == "b-chat"
    assert fair[0].reason == (
        "preempted for b-chat: borrowed past org/a's guarantee, "
        "reclaimed toward fair share by org/b: 1.0 of 3.0 GPUs"
    )


def _borrowed_all(cls: str, a_min: int) -> Snapshot:
    # org/a holds all 4 GPUs, guaranteed none; org/b (no guarantee either) asks for 4.
    reps = [replica(f"r-a{i}", "a-chat", [("n1", [f"n1-g{i}"])]) for i in range(4)]
    return snap(
        nodes=[node("n1", 4)],
        models=[
            model("a-chat", cls, "org/a", lo=a_min, hi=4),
            model("b-chat", cls, "org/b", hi=4),
        ],
        replicas=reps,
        quotas=[{"owner": "org/a"}, {"owner": "org/b"}],
    )


def test_minimums_are_never_taken_toward_fair_share() -> None:
    # The fair split is 2 and 2, but a-chat's minimum is 3: org/b gets the one above it.
    after, _ = run(_borrowed_all("standard", a_min=3), passes=12)
    assert live_per_model(after) == {"a-chat": 3, "b-chat": 1}
    after, _ = run(_borrowed_all("standard", a_min=0), passes=12)
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 2}


def test_critical_replicas_are_never_taken_toward_fair_share() -> None:
    after, plans = run(_borrowed_all("critical", a_min=0), passes=12)
    assert live_per_model(after) == {"a-chat": 4}
    assert not [a for p in plans for a in stops(p)]


def test_a_lower_class_never_takes_toward_fair_share() -> None:
    # b-chat is below org/a's class: the class decides (rule R1), not the share.
    s = _borrowed_all("standard", a_min=0)
    b = s.models[1].model_copy(update={"class_": "opportunistic"})
    after, _ = run(s.model_copy(update={"models": [s.models[0], b]}), passes=12)
    assert live_per_model(after) == {"a-chat": 4}
