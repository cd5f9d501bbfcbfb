"""Decayed usage (rule F4): what an owner held lately, in GPU-seconds halving every
usage_half_life_s, is handed from plan to snapshot; an owner who used much lately comes after
the others for free room and yields first; off (0) nothing changes."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st
from preemption_snapshots import live_per_model, model, node, run, snap

from scheduler.core.calm import calm_until
from scheduler.core.decide import decide
from scheduler.core.models import OwnerUsage, Snapshot
from scheduler.core.usage import FORGOTTEN, carried, decayed, recent_share

HOUR = 3600.0
TAU = HOUR / math.log(2)


def _two_owners(half_life_s: int, a_used: float) -> Snapshot:
    # 4 free GPUs, two owners that only borrow, both wanting all 4; org/a held the whole
    # fleet for a long while (a_used: its usage as a fraction of that).
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("a-chat", "standard", "org/a", hi=4),
            model("b-chat", "standard", "org/b", hi=4),
        ],
        quotas=[{"owner": "org/a"}, {"owner": "org/b"}],
        settings={"usage_half_life_s": half_life_s, "min_lifetime_s": 0},
    )
    used = {"org/a": OwnerUsage(gpu_s=a_used * 4 * TAU, at=s.now)}
    return s.model_copy(update={"usage": used})


def test_off_the_usage_changes_nothing_and_nothing_is_handed_on() -> None:
    plan = decide(_two_owners(0, a_used=1.0))
    assert plan.usage == {}
    assert plan == decide(_two_owners(0, a_used=0.0))
    after, _ = run(_two_owners(0, a_used=1.0), passes=3)
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 2}


def test_an_owner_who_used_much_lately_comes_after_the_others() -> None:
    after, plans = run(_two_owners(int(HOUR), a_used=1.0), passes=3)
    assert live_per_model(after)["b-chat"] > live_per_model(after).get("a-chat", 0)
    # The usage is handed on: org/a's decays, org/b's grows with what it holds.
    assert set(plans[-1].usage) == {"org/a", "org/b"}
    assert plans[-1].usage["org/a"].gpu_s < 4 * TAU


def test_as_the_usage_decays_the_split_goes_back_to_the_fair_one() -> None:
    # A pass an hour for a day: org/a's old usage is forgotten, org/b's holding counts; the
    # weighted fair share (2 and 2) comes back by reclaim toward fair share (rule R7).
    after, _ = run(_two_owners(int(HOUR), a_used=1.0), passes=24, advance_s=HOUR)
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 2}


def test_the_clock_alone_changes_a_plan_that_hands_usage_on() -> None:
    s = _two_owners(int(HOUR), a_used=1.0)
    plan = decide(s)
    until = calm_until(s, plan)
    assert until is not None and until <= s.now + timedelta(seconds=60)


@given(
    st.floats(0, 1e7),
    st.floats(0, 64),
    st.floats(1, 1e5),
    st.floats(0, 1e6),
)
def test_usage_decays_and_accrues_within_bounds(
    old: float, held: float, half_life: float, elapsed: float
) -> None:
    s = _two_owners(int(half_life), a_used=0.0)
    s = s.model_copy(update={"usage": {"org/a": OwnerUsage(gpu_s=old, at=s.now)}})
    later = s.model_copy(update={"now": s.now + timedelta(seconds=elapsed)})
    half = s.settings.usage_half_life_s
    tau = half / math.log(2)
    elapsed = (later.now - s.now).total_seconds()  # to the microsecond, as the core reads it
    keep = 0.5 ** (elapsed / half)
    want = old * keep + held * tau * (1 - keep)
    new = carried(later, {"org/a": held}).get("org/a")
    if new is None:  # forgotten: under a GPU-second, and nothing held now
        assert want < FORGOTTEN and held == 0
        return
    assert new.at == later.now
    assert math.isclose(new.gpu_s, want, rel_tol=1e-9, abs_tol=1e-6)
    # Between what was carried (decayed) and the steady state of the holding.
    assert min(old, held * tau) - 1e-6 <= new.gpu_s <= max(old, held * tau) + 1e-6
    assert math.isclose(decayed(new, later.now + timedelta(seconds=half), half), new.gpu_s / 2)
    assert 0 <= recent_share(later, 4.0).get("org/a", 0.0) <= 1.0
