"""The expected start-to-ready time: a default from the weight size until starts are seen, then
a weighted mean of the observed times per model and warmth; kept as JSON that reads back the
same, with bad parts named and left out; each start counted once, when its replica is ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduler.core.fleet import Replica
from scheduler.ops.time_to_ready import (
    MAX_SECONDS,
    SERVER_OVERHEAD_S,
    ReadyEstimates,
    ReadyTracker,
    default_s,
    ready_sentence,
    spoken,
)

GB = 10**9
T0 = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
times = st.floats(min_value=0, max_value=MAX_SECONDS)


def test_the_default_downloads_then_loads_cold_and_only_loads_warm() -> None:
    # 20 GB: 160 Gbit, 16 s at 10 Gbit/s, 10 s at 16 Gbit/s.
    assert default_s("warm", 20 * GB, 10.0, 16.0) == SERVER_OVERHEAD_S + 10
    assert default_s("cold", 20 * GB, 10.0, 16.0) == SERVER_OVERHEAD_S + 16 + 10
    assert default_s("cold", None, 10.0, 16.0) is None  # unknown size: no guess


def test_a_learned_time_replaces_the_default() -> None:
    est = ReadyEstimates()
    assert est.expected_s("m", "cold", 20 * GB) == default_s("cold", 20 * GB, 10.0, 16.0)
    est.observe("m", "cold", 300.0)
    assert est.expected_s("m", "cold", 20 * GB) == 300.0
    assert est.expected_s("m", "warm", None) is None  # warm not seen, size unknown


@given(st.lists(times, min_size=1, max_size=30))
def test_the_mean_stays_within_the_observed_times(seen: list[float]) -> None:
    est = ReadyEstimates()
    for s in seen:
        assert est.observe("m", "warm", s)
    got = est.observed[("m", "warm")]
    assert got.count == len(seen)
    assert min(seen) - 1e-6 <= got.mean_s <= max(seen) + 1e-6


def test_the_newest_start_weighs_more_than_the_oldest() -> None:
    est = ReadyEstimates()
    for s in (100.0, 100.0, 100.0, 400.0):
        est.observe("m", "cold", s)
    assert 100.0 < est.observed[("m", "cold")].mean_s < 250.0  # moved towards it, not to it


def test_times_that_are_not_times_are_not_learned() -> None:
    est = ReadyEstimates()
    for bad in (-1.0, float("nan"), float("inf"), MAX_SECONDS + 1):
        assert not est.observe("m", "cold", bad)
    assert est.observed == {}


@given(st.dictionaries(st.tuples(st.text(min_size=1), st.sampled_from(["warm", "cold"])),
                       st.tuples(times, st.integers(1, 10)), max_size=5))  # fmt: skip
def test_the_estimates_read_back_as_they_were_written(raw: dict) -> None:
    est = ReadyEstimates()
    for (model, warmth), (mean, count) in raw.items():
        for _ in range(count):
            est.observe(model, warmth, mean)
    problems: list[str] = []
    assert ReadyEstimates.from_json(est.to_json(), "k", problems).observed == est.observed
    assert problems == []


def test_a_bad_part_is_named_by_key_and_field_and_the_rest_stands() -> None:
    data = {
        "models": {
            "good": {"warm": {"mean_s": 40.0, "count": 2}},
            "bad": {"warm": {"mean_s": -3, "count": 1}, "cold": {"mean_s": 9, "count": 0}},
            "odd": "x",
        }
    }
    problems: list[str] = []
    est = ReadyEstimates.from_json(data, "p/state/time-to-ready", problems)
    assert set(est.observed) == {("good", "warm")}
    assert any(p.startswith("p/state/time-to-ready: models.bad.warm: ") for p in problems)
    assert any(p.startswith("p/state/time-to-ready: models.bad.cold: ") for p in problems)
    assert any(p.startswith("p/state/time-to-ready: models.odd.warm: ") for p in problems)
    problems.clear()
    assert ReadyEstimates.from_json([], "k", problems).observed == {}
    assert problems == ["k: models: Input should be a JSON object"]


def _replica(rid: str, ready_after_s: float | None) -> Replica:
    ready = T0 + timedelta(seconds=ready_after_s) if ready_after_s is not None else None
    return Replica(
        id=rid,
        model="m",
        profile="p",
        state="running" if ready else "starting",
        created_at=T0,
        ready_at=ready,
    )


def test_a_start_is_learned_once_when_its_replica_is_ready_with_its_warmth() -> None:
    tracker = ReadyTracker()
    tracker.started("r1", "m", "warm")
    assert tracker.passed([]) == []  # not listed yet
    assert tracker.passed([_replica("r1", None)]) == []  # starting
    assert tracker.passed([_replica("r1", 42.0)]) == [("m", "warm", 42.0)]
    assert tracker.passed([_replica("r1", 42.0)]) == []  # once
    assert tracker.estimates.observed[("m", "warm")].count == 1


def test_a_replica_gone_before_it_was_ready_is_forgotten() -> None:
    tracker = ReadyTracker()
    tracker.started("r1", "m", "cold")
    tracker.passed([_replica("r1", None)])
    tracker.passed([])  # it went
    assert tracker.passed([_replica("r1", 10.0)]) == []  # not this start any more
    assert tracker.estimates.observed == {}


def test_a_replica_not_started_here_teaches_nothing() -> None:
    tracker = ReadyTracker()
    assert tracker.passed([_replica("other", 5.0)]) == []


def test_the_sentence_says_where_it_is_warm_and_how_long_cold_takes() -> None:
    text = ready_sentence(40.0, 360.0, ["gpu-h100-3"], {"warm": 2, "cold": 1})
    assert text == (
        "warm on gpu-h100-3: about 40 s; cold elsewhere: about 6 min (learned from 3 starts)"
    )
    assert ready_sentence(None, None, [], {}) == (
        "cold: unknown (weight size not known) (from weight size)"
    )
    assert [spoken(s) for s in (0.2, 89, 95, 5400)] == ["about 1 s", "about 89 s", "about 2 min",
                                                      "about 1.5 h"]  # fmt: skip
