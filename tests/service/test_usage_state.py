"""The decayed-usage key (rule F4) as the service reads and writes it: good entries go into the
snapshot, a bad one is named by key and field and written back as it was read, a value that is
not an object of owners is never written over; and end to end over the stand-ins, the leader
keeps the usage of the owners it runs and a new instance goes on from it."""

from __future__ import annotations

import json
from typing import Any

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.adapters.usage_state import parse_usage, usage_record
from scheduler.core.models import OwnerUsage
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    small_fleet,
    start_leader,
    status,
    wait_for,
)

KEY = LAYOUT.usage
AT = "2026-12-02T10:00:00Z"


def _entries(value: Any) -> list[dict[str, Any]]:
    raw = value if isinstance(value, str) else json.dumps(value)
    return [{"Key": KEY, "Value": raw}]


def test_good_entries_are_read_and_written_back_with_the_new_usage() -> None:
    problems: list[str] = []
    read = parse_usage(_entries({"owners": {"org/a": {"gpu_s": 7200, "at": AT}}}), KEY, problems)
    assert problems == [] and read.writable
    assert read.usage["org/a"].gpu_s == 7200
    new = {"org/a": OwnerUsage.model_validate({"gpu_s": 7300.5, "at": "2026-12-02T10:01:00Z"})}
    assert usage_record(new, read) == {
        "owners": {"org/a": {"gpu_s": 7300.5, "at": "2026-12-02T10:01:00Z"}}
    }


def test_a_bad_entry_is_named_left_out_and_kept_as_it_was() -> None:
    bad = {"gpu_s": -5, "at": AT}
    problems: list[str] = []
    value = {"owners": {"org/a": {"gpu_s": 1, "at": AT}, "org/x": bad, "org/y": {"gpu_s": 3}}}
    read = parse_usage(_entries(value), KEY, problems)
    assert set(read.usage) == {"org/a"}
    assert any(p.startswith(f"{KEY}: owners.org/x: gpu_s") for p in problems), problems
    assert any(p.startswith(f"{KEY}: owners.org/y: at") for p in problems), problems
    record = usage_record({}, read)
    assert record is not None and record["owners"] == {"org/x": bad, "org/y": {"gpu_s": 3}}


def test_a_value_that_is_not_an_object_of_owners_is_never_written_over() -> None:
    for raw in ("{not json", json.dumps({"owners": [1, 2]}), json.dumps([1])):
        problems: list[str] = []
        read = parse_usage(_entries(raw), KEY, problems)
        assert read.usage == {} and not read.writable
        assert len(problems) == 1 and problems[0].startswith(f"{KEY}:"), problems
        assert usage_record({}, read) is None
    assert parse_usage([], KEY, []).writable  # absent: nothing kept yet, free to write


def _kept(dc: DevCluster) -> dict[str, Any]:
    raw = dc.consul.kv_get(KEY)
    return json.loads(raw) if raw else {}


def test_the_leader_keeps_the_usage_and_a_new_instance_goes_on_from_it() -> None:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05) as dc:
        put(dc, LAYOUT.settings, {**FAST_SETTINGS, "usage_half_life_s": 3600})
        put(dc, LAYOUT.quota_key("org/a"), {"guarantee": {"gpus": 1}})
        bad = {"gpu_s": "lots", "at": AT}
        put(dc, KEY, {"owners": {"org/old": bad}})
        scaling = {"min": 1, "max": 1, "target_per_replica": 10}
        put(dc, LAYOUT.model_key("m"), model_value([{"name": "g1", "gpus": 1}], scaling=scaling))
        first = start_leader(dc)
        try:
            kept = wait_for(lambda: _kept(dc).get("owners", {}).get("org/a"), what="usage kept")
            # The bad entry is still there, as it was, and named in the errors record.
            assert _kept(dc)["owners"]["org/old"] == bad
            errors = status(dc, "_errors") or {}
            assert any("owners.org/old: gpu_s" in e for e in errors.get("errors", [])), errors
            grown = wait_for(
                lambda: (u := _kept(dc)["owners"]["org/a"])["gpu_s"] > kept["gpu_s"] and u,
                what="usage accruing",
            )
        finally:
            first.stop()
        second = start_leader(dc)
        try:
            # It goes on from what the first kept (never starts again from nothing).
            later = wait_for(
                lambda: (u := _kept(dc)["owners"]["org/a"])["at"] > grown["at"] and u,
                what="the second's usage",
            )
            assert later["gpu_s"] > grown["gpu_s"] * 0.99
        finally:
            second.stop()
