"""The sentences operators read in `status` and `why`: no count said twice, no number with
more digits than it means."""

from __future__ import annotations

from scheduler.core.facts import limit_exceeded
from scheduler.core.models import Amount, Profile
from scheduler.core.reasons import sentence


def test_a_mig_profile_short_everywhere_is_said_once() -> None:
    profile = Profile(name="mig-1g", mig_profile="1g.10gb")
    text = sentence(profile, 0, {"no free 1g.10gb slice": 6})
    assert text == "profile mig-1g: no free 1g.10gb slice on any of 6 nodes"
    assert sentence(profile, 0, {"no free 1g.10gb slice": 1}).endswith("on the only node")


def test_each_reason_says_on_how_many_nodes() -> None:
    profile = Profile(name="tp4", gpus=4)
    text = sentence(profile, 0, {"too few free GPUs": 12, "not in pool gpu": 1})
    assert text == (
        "profile tp4: no node has 4 free GPUs "
        "(too few free GPUs on 12 nodes, not in pool gpu on 1 node)"
    )


def test_a_quota_limit_names_the_unit_and_rounds_fractions_of_a_gpu() -> None:
    text = limit_exceeded(
        {"org": Amount(gpus=45)}, {"org": (44.5714285, 0.0, 0.0)}, "org/a", (1.0, 0.0, 0.0)
    )
    assert text == ("quota limit of org reached: 44.57 of 45 GPUs in use, one more replica needs 1")
