"""Every stop, start and pending model carries a reason code beside its sentence, and the
code says what the sentence says; a replica stopped still starting past its load grace is
named in its model's status with its code."""

from __future__ import annotations

from datetime import timedelta

from golden_plans import runs, scenario

from scheduler.core.decide import decide
from scheduler.core.models import Plan, StartAction, StopAction
from tests.core import preemption_snapshots as hand

# Which sentences each code goes with (the sentence's start).
STOP_WORDS = {
    "timed_out": "still starting after",
    "draining": "its node is draining",
    "unhealthy_gpu": "its GPU",
    "rolling_update": "rolling update:",
    "rollout_stalled": "roll-out stopped:",
    "consolidation": "consolidation:",
    "retired": "retired:",
    "scale_down": "scale down:",
    "profile_removed": "replaced: profile",
    "preempted_idle": "preempted for",
    "preempted_borrowed": "preempted for",
    "preempted_lower_class": "preempted for",
    "preempted_same_class": "preempted for",
    "preempted_fair_share": "preempted for",
    "preempted_lower_minimum": "preempted for",
}
START_WORDS = {
    "scale_up": "scale up:",
    "rolling_update": "rolling update:",
    "consolidation": "consolidate: replaces",
    "defragmentation": "consolidate: moves",
}
PENDING_WORDS = {
    "held": ("held ",),
    "waiting_for_victims": ("waiting for preempted replicas",),
    # One sentence per profile: the first may be a quota's even when another lacks room.
    "no_room": ("profile ", "quota limit"),
    "preemption_held_back": ("profile ", "quota limit"),
    "quota_limit": ("quota limit",),
    "retiring": ("retiring:",),
    "profile_removed": ("removed profile",),
}


def check_codes(plan: Plan) -> None:
    for a in plan.actions:
        if isinstance(a, StopAction):
            assert a.code is not None and a.reason.startswith(STOP_WORDS[a.code]), a
            assert (a.preempted_for is not None) == a.code.startswith("preempted"), a
        else:
            assert isinstance(a, StartAction)
            assert a.code is not None and a.reason.startswith(START_WORDS[a.code]), a
    for name, st in plan.models.items():
        assert (st.pending is None) == (st.pending_code is None), name
        if st.pending is not None and st.pending_code is not None:
            assert st.pending.startswith(PENDING_WORDS[st.pending_code]), (name, st.pending)
        if st.pending_code == "quota_limit":
            assert all(t.note is not None for t in st.tried), name
        if st.pending_code == "no_room":
            assert any(t.note is None for t in st.tried), name
    timed_out = {a.replica: a.reason for a in plan.actions if a.code == "timed_out"}
    noted = {t.replica: t.reason for st in plan.models.values() for t in st.timed_out}
    assert noted == timed_out


def test_generated_plans_carry_codes_that_match_their_sentences() -> None:
    codes: set[str] = set()
    for seed in range(150):
        scn = scenario(seed)
        assert scn is not None
        for _, plan in runs(scn, None):
            check_codes(plan)
            codes |= {a.code for a in plan.actions if a.code is not None}
            codes |= {s.pending_code for s in plan.models.values() if s.pending_code}
    # The scenarios reach most kinds of reason: a code never given would go unnoticed.
    assert {"scale_up", "scale_down", "timed_out", "held", "no_room"} <= codes, codes
    assert any(c.startswith("preempted_") for c in codes), codes


def test_a_replica_stuck_starting_is_named_in_its_models_status() -> None:
    created = hand.snap().now - timedelta(hours=2)
    s = hand.snap(
        nodes=[hand.node("n1", 2)],
        models=[hand.model("m", "standard", "org/a", lo=1, hi=1)],
        replicas=[
            hand.replica(
                "r-1", "m", [("n1", ["n1-g0"])], state="starting", created_at=created, ready_at=None
            )
        ],
    )
    plan = decide(s)
    [stop] = [a for a in plan.actions if isinstance(a, StopAction)]
    assert stop.code == "timed_out"
    [noted] = plan.models["m"].timed_out
    assert (noted.replica, noted.code, noted.reason) == ("r-1", "timed_out", stop.reason)
    assert noted.reason == "still starting after 7200s, past its load grace of 1800s"
    check_codes(plan)
