"""Adding up the gateways' demand keys: the sum with the single key, a vanished instance kept
through the grace and then read as an explicit zero, a bad value keeping the last good one;
reading the keys from a KV listing; the gateway's view of catalog values and statuses."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduler.adapters.catalog import read_catalog
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import Demand
from scheduler.demand.gateways import GatewayDemand
from scheduler.gateway.catalog import cannot_come, read_models

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LAYOUT = KVLayout()


def d(inflight: int = 0, queued: int = 0, minute: int | None = None) -> Demand:
    used = None if minute is None else T0 + timedelta(minutes=minute)
    return Demand(inflight=inflight, queued=queued, last_used=used)


def test_instances_and_the_single_key_add_up() -> None:
    merged = GatewayDemand().merge(
        {"a": d(1, 0, 1)},
        {"g1": {"a": d(2, 1, 3)}, "g2": {"a": d(4, 0, 2), "b": d(0, 5)}},
        set(),
        T0,
        60,
    )
    assert merged == {"a": d(7, 1, 3), "b": d(0, 5)}


def test_a_vanished_instance_counts_through_the_grace_then_as_zero() -> None:
    gd = GatewayDemand()
    gd.merge({}, {"g1": {"a": d(3, 0, 1)}, "g2": {"a": d(1)}}, set(), T0, 60)
    during = gd.merge({}, {"g2": {"a": d(1)}}, set(), T0 + timedelta(seconds=59), 60)
    assert during["a"] == d(4, 0, 1)
    after = gd.merge({}, {"g2": {"a": d(1)}}, set(), T0 + timedelta(seconds=120), 60)
    assert after["a"] == d(1, 0, 1)  # only g2, the last use remembered
    assert gd.gone == {}


def test_the_only_gateway_gone_leaves_an_explicit_zero_not_a_missing_key() -> None:
    """Missing would start the builder's own grace for the model a second time."""
    gd = GatewayDemand()
    gd.merge({}, {"g1": {"a": d(2)}}, set(), T0, 10)
    assert gd.merge({}, {}, set(), T0 + timedelta(seconds=5), 10) == {"a": d(2)}
    assert gd.merge({}, {}, set(), T0 + timedelta(seconds=16), 10) == {"a": d(0)}
    assert gd.expires(10) == []


def test_an_unreadable_instance_keeps_its_last_good_counts() -> None:
    gd = GatewayDemand()
    gd.merge({}, {"g1": {"a": d(2)}}, set(), T0, 10)
    assert gd.merge({}, {}, {"g1"}, T0 + timedelta(seconds=30), 10) == {"a": d(2)}


@given(
    st.lists(
        st.dictionaries(st.sampled_from(["g1", "g2", "g3"]), st.integers(0, 50), max_size=3),
        min_size=1,
        max_size=8,
    )
)
def test_never_below_the_live_sum_and_never_above_live_plus_last(
    passes: list[dict[str, int]],
) -> None:
    """Whatever instances come and go, within the grace the sum is at least what the live
    instances say and at most that plus what every instance last said."""
    gd = GatewayDemand()
    seen: dict[str, int] = {}
    for i, counts in enumerate(passes):
        merged = gd.merge(
            {}, {g: {"m": d(n)} for g, n in counts.items()}, set(), T0 + timedelta(seconds=i), 3600
        )
        total = merged["m"].inflight if "m" in merged else 0
        live = sum(counts.values())
        seen.update(counts)
        assert live <= total <= live + sum(seen.values())


def _entry(key: str, value: object) -> dict[str, object]:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return {"Key": key, "Value": raw}


def test_the_catalog_reads_instance_keys_and_reports_bad_ones() -> None:
    good = {"instance": "g1", "models": {"a": {"inflight": 2, "queued": 1}}}
    entries = [
        _entry(LAYOUT.gateway_demand_key("g1"), good),
        _entry(LAYOUT.gateway_demand_key("g2"), b"{broken"),
        _entry(LAYOUT.gateway_demand_key("g3"), {"models": {"a": {"inflight": -1}}}),
        _entry(LAYOUT.demand_key("a"), {"inflight": 1}),
    ]
    cat = read_catalog(entries, LAYOUT)
    assert cat.gateways == {"g1": {"a": d(2, 1)}}
    assert cat.bad_gateways == {"g2", "g3"}
    assert cat.demand == {"a": d(1)}
    lines = cat.all_errors()
    assert any(line.startswith("llm-scheduler/gateways/g2: ") for line in lines)
    assert any(
        "llm-scheduler/gateways/g3: models.a" in line and "inflight" in line for line in lines
    )


def _kv(key: str, value: object) -> dict[str, object]:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return {"Key": key, "Value": base64.b64encode(raw).decode()}


def test_the_gateway_reads_model_bounds_with_defaults_for_bad_ones() -> None:
    entries = [
        _kv(LAYOUT.model_key("a"), {"activation_timeout_s": 30, "max_queued": 5}),
        _kv(LAYOUT.model_key("b"), {"activation_timeout_s": -1}),
        _kv(LAYOUT.model_key("c"), b"not json"),
        _kv(LAYOUT.model_key("Bad Name"), {}),
        # As strict as the scheduler's catalog: a number in a string is refused, not coerced.
        _kv(LAYOUT.model_key("d"), {"max_queued": "5"}),
    ]
    models, problems = read_models(entries, LAYOUT.models, 600, 100)
    assert {n: (m.activation_timeout_s, m.max_queued) for n, m in models.items()} == {
        "a": (30, 5),
        "b": (600, 100),
        "c": (600, 100),
        "d": (600, 100),
    }
    assert any("models/b: activation_timeout_s" in p for p in problems)
    assert any("models/d: max_queued" in p for p in problems)
    assert any("models/c: not JSON" in p for p in problems)


def test_cannot_come_only_for_reasons_that_will_not_clear() -> None:
    never = {"profile": "p", "short": {"gpu-model": 3}, "unresolvable": ["gpu-model"]}
    full = {"profile": "p", "short": {"gpu-count": 3}, "unresolvable": []}
    mixed = {"profile": "p", "short": {"gpu-model": 2, "gpu-count": 1},
             "unresolvable": ["gpu-model"]}  # fmt: skip
    base = {"desired": 1, "live": 0, "pending": "profile p: no node has ...", "replicas": [],
            "pending_code": "no_room"}  # fmt: skip
    assert cannot_come({**base, "tried": [never]}) == base["pending"]
    assert cannot_come({**base, "tried": [never, full]}) is None  # room may come
    assert cannot_come({**base, "tried": [mixed]}) is None
    assert cannot_come({**base, "tried": []}) is None
    quota = {**base, "pending_code": "quota_limit", "tried": [{"profile": "p", "note": "q"}]}
    assert cannot_come(quota) == base["pending"]
    for code in ("held", "waiting_for_victims", "preemption_held_back", None):
        assert cannot_come({**base, "pending_code": code, "tried": [never]}) is None
    assert cannot_come({**base, "pending": None, "tried": [never]}) is None
    assert cannot_come({**base, "live": 1, "tried": [never]}) is None
    assert cannot_come({**base, "tried": [{"short": "x"}]}) is None
    assert cannot_come("garbage") is None
