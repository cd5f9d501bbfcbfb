"""several signals, the largest wins, starting replicas count, no flapping."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.core.decide import decide
from scheduler.core.models import (
    DesiredMark,
    Load,
    Model,
    Replica,
    Scaling,
    Settings,
    Snapshot,
    StopAction,
)
from scheduler.core.scaling import remember, want
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import SnapshotError, parse_snapshot

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
OBJECTIVES: dict[str, Any] = {
    "min": 1,
    "max": 10,
    "target_per_replica": 100,
    "kv_cache_target": 0.8,
    "queue_per_replica": 5,
    "ttft_p90_ms": 500,
    "itl_p90_ms": 50,
}


def _model(**scaling: Any) -> Model:
    return Model.model_validate(
        {
            "name": "m",
            "owner": "o",
            "scaling": {**OBJECTIVES, **scaling},
            "profiles": [{"name": "p", "gpus": 1}],
        }
    )


def _reps(running: int, starting: int = 0) -> list[Replica]:
    out = []
    for i in range(running + starting):
        state = "running" if i < running else "starting"
        out.append(
            Replica(
                id=f"r{i}",
                model="m",
                profile="p",
                state=state,
                created_at=NOW - timedelta(hours=1),
                ready_at=NOW - timedelta(hours=1) if state == "running" else None,
            )
        )
    return out


def test_the_largest_signal_wins_and_says_so() -> None:
    load = Load(running=20, waiting=4, kv_cache=0.41, ttft_p90_ms=840, itl_p90_ms=30, reporting=2)
    w = want(_model(), None, load, _reps(2), [], NOW, Settings())
    # ttft asks ceil(2 * 840/500) = 4; queue 2/5 asks 1, kv 0.41/0.80 asks 2, itl asks 2.
    assert w.count == 4
    assert w.why == (
        "4 replicas: ttft p90 840 ms > 500 ms objective (queue 2/5, kv 0.41/0.80, itl p90 30/50)"
    )


@pytest.mark.parametrize(
    ("load", "signal", "count"),
    [
        (Load(waiting=31, reporting=2), "queue 15.5 per replica > 5", 7),
        (Load(kv_cache=0.95, reporting=4), "kv 0.95 > 0.80 objective", 5),
        (Load(itl_p90_ms=120, reporting=2), "itl p90 120 ms > 50 ms objective", 5),
    ],
)
def test_each_signal_alone_scales(load: Load, signal: str, count: int) -> None:
    w = want(_model(), None, load, _reps(load.reporting), [], NOW, Settings())
    assert w.count == count and signal in w.why


def test_within_ten_percent_keeps_the_count() -> None:
    # 4 replicas, ttft 540 ms against 500 ms (8% over): no fifth replica, no scale-down either.
    w = want(_model(), None, Load(ttft_p90_ms=540, reporting=4), _reps(4), [], NOW, Settings())
    assert w.count == 4
    w = want(_model(), None, Load(ttft_p90_ms=560, reporting=4), _reps(4), [], NOW, Settings())
    assert w.count == 5  # 12% over: one more


def test_starting_replicas_are_capacity_on_its_way() -> None:
    """A slow load does not ask for more and more: the ttft measured on 2 serving replicas asks
    for 4, and the 2 still starting already answer it, pass after pass."""
    load = Load(ttft_p90_ms=1000, reporting=2)
    for minute in range(10):
        now = NOW + timedelta(minutes=minute)
        w = want(_model(), None, load, _reps(2, starting=2), [], now, Settings())
        assert w.count == 4


def test_clamped_and_said_so() -> None:
    w = want(
        _model(max=3), None, Load(ttft_p90_ms=5000, reporting=2), _reps(2), [], NOW, Settings()
    )
    assert w.count == 3
    assert w.why == "3 replicas: maximum 3, ttft p90 5000 ms > 500 ms objective"


def test_incomplete_metrics_never_scale_down() -> None:
    load = Load(ttft_p90_ms=10, reporting=2, complete=False)
    w = want(_model(), None, load, _reps(5), [], NOW, Settings(scale_down_window_s=0))
    assert w.count == 5 and "metrics incomplete" in w.why
    # ... but may still scale up
    load = Load(ttft_p90_ms=2000, reporting=2, complete=False)
    assert want(_model(), None, load, _reps(2), [], NOW, Settings()).count == 8


def test_scale_down_waits_for_the_window_then_steps() -> None:
    settings = Settings(scale_down_window_s=300, scale_down_step=1)
    load = Load(ttft_p90_ms=100, reporting=5)  # asks ceil(5 * 0.2) = 1
    marks = [DesiredMark(at=NOW - timedelta(seconds=400), count=5)]
    marks.append(DesiredMark(at=NOW - timedelta(seconds=200), count=5))
    w = want(_model(), None, load, _reps(5), marks, NOW, settings)
    assert w.count == 5 and w.recommended == 1 and "scale-down held" in w.why
    later = NOW + timedelta(seconds=101)  # the last 5 left the window: down by one step
    w = want(_model(), None, load, _reps(5), marks, later, settings)
    assert w.count == 4
    # a per-model window overrides the setting
    w = want(_model(scale_down_window_s=0), None, load, _reps(5), marks, NOW, settings)
    assert w.count == 4


def test_just_restarted_keeps_its_count_until_a_window_was_watched() -> None:
    load = Load(ttft_p90_ms=100, reporting=5)
    marks = [DesiredMark(at=NOW - timedelta(seconds=10), count=1)]
    assert want(_model(), None, load, _reps(5), marks, NOW, Settings()).count == 5
    assert want(_model(), None, load, _reps(5), [], NOW, Settings()).count == 5


def test_idle_on_demand_still_goes_to_zero_after_its_grace() -> None:
    m = _model(min=0, on_demand=True)
    reps = _reps(3)
    w = want(m, None, Load(running=0, waiting=0, reporting=3), reps, [], NOW, Settings())
    assert w.count == 0 and "idle" in w.why


def test_remember_keeps_the_window_and_one_before() -> None:
    marks = [DesiredMark(at=NOW - timedelta(seconds=s), count=s) for s in (900, 400, 350, 100)]
    kept = remember(marks, NOW, 7, 300)
    assert [m.count for m in kept] == [350, 100, 7]


def _fleet_snapshot(settings: dict[str, int]) -> Snapshot:
    return parse_snapshot(
        {
            "now": "2026-12-02T10:00:00Z",
            "settings": {"min_lifetime_s": 0, **settings},
            "nodes": [
                {
                    "id": "n1",
                    "name": "a",
                    "cpu_cores": 128,
                    "memory_gb": 1024,
                    "gpus": [{"id": f"G{i}", "model": "H100", "memory_gb": 80} for i in range(16)],
                }
            ],
            "models": [
                {
                    "name": "m",
                    "owner": "o",
                    "scaling": {
                        "min": 1,
                        "max": 16,
                        "target_per_replica": 1000,
                        "ttft_p90_ms": 500,
                    },
                    "profiles": [{"name": "p", "gpus": 1}],
                }
            ],
        }
    )


def _ttft_for(load_rps: float, serving: int) -> float:
    """A toy server: ttft proportional to the load per serving replica (500 ms at 10 rps)."""
    return 50.0 * load_rps / max(serving, 1)


def test_noisy_trace_never_scales_down_and_a_real_drop_does_once() -> None:
    rng = random.Random(18)
    snap = _fleet_snapshot({"scale_down_window_s": 300})
    downs: list[tuple[int, StopAction]] = []
    counts: list[int] = []
    asked: list[int] = []
    for step in range(120):  # one pass every 10 s: 20 minutes
        serving = sum(1 for r in snap.replicas if r.counts)
        rps = 60.0 if step < 80 else 20.0  # a real drop after 800 s
        ttft = _ttft_for(rps, serving) * rng.uniform(0.7, 1.3)  # jitter +-30%
        snap = snap.model_copy(
            update={"load": {"m": Load(ttft_p90_ms=ttft, reporting=serving, running=rps)}}
        )
        plan = decide(snap)
        downs += [(step, a) for a in plan.actions if isinstance(a, StopAction)]
        asked.append(plan.models["m"].recommended or 0)
        snap = apply_plan(snap, plan, advance_s=10)
        counts.append(sum(1 for r in snap.replicas if r.counts))
    before = [d for d in downs if d[0] < 80]
    assert not before, f"scaled down on noise: {before}"
    assert max(counts[:80]) == counts[79], "the noise ratchets up, never down"
    # After the drop: one scale-down, once the window (300 s = 30 passes) has passed since
    # the signals last asked for what it had; and no later than a window after the drop.
    assert downs, "a real drop never scaled down"
    first = downs[0][0]
    last_high = max(i for i in range(first) if asked[i] >= counts[first - 1])
    assert first - last_high >= 30, f"scaled down {first - last_high} passes after {last_high}"
    assert first <= 80 + 30
    # Each later step down also waits for the higher asks to leave the window (HPA's rule);
    # it ends at what the lower load asks for: 20 rps are 100 ms per replica of 8, so 2 or 3.
    for step, _ in downs:
        assert max(asked[max(step - 29, 0) : step + 1]) < counts[step - 1]
    assert counts[-1] <= 3


def test_bad_policy_values_name_the_field() -> None:
    for bad, field in [
        ({"kv_cache_target": 1.5}, "kv_cache_target"),
        ({"ttft_p90_ms": -5}, "ttft_p90_ms"),
        ({"itl_p90_ms": float("nan")}, "itl_p90_ms"),
        ({"latency_p99_ms": 100}, "latency_p99_ms"),
    ]:
        with pytest.raises(ValidationError) as err:
            Scaling.model_validate({"min": 0, "max": 2, **bad})
        assert field in str(err.value)
    snap = _fleet_snapshot({}).model_dump(mode="json", by_alias=True)
    snap["models"][0]["scaling"]["kv_cache_target"] = 1.5
    with pytest.raises(SnapshotError) as serr:
        parse_snapshot(snap)
    assert serr.value.problems[0].startswith("models[0].scaling.kv_cache_target")
