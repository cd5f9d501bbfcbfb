"""What the actuator's overlay adds to a snapshot while a register is in flight or just done:
a finished call stops counting once a job listing shows it, by time (the listing was asked for
after the call returned) or by Nomad's index (the listing's X-Nomad-Index reached the
JobModifyIndex the call answered). A listing taken from a watch was asked for before the call,
so only the index can tell; a call that failed has no index, so only time can."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from scheduler.adapters.nomad_api import NomadAPI
from scheduler.core.models import Shard, Snapshot, StartAction
from scheduler.service.actuator import Actuator
from scheduler.service.in_flight import Pending

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _actuator() -> Actuator:
    # Never called: the pending table is set by hand, as a worker leaves it.
    return Actuator(NomadAPI("http://127.0.0.1:9"), namespace=None, images={}, workers=0)


def _start(replica: str) -> StartAction:
    shard = Shard(node="node-1", gpus=["GPU-1"])
    return StartAction(model="m", profile="p", replica=replica, shards=[shard], reason="up")


def _in_overlay(act: Actuator, read_at: float, index: int) -> set[str]:
    return {r.id for r in act.overlay(Snapshot(now=NOW), read_at, index).replicas}


def test_a_finished_register_stops_counting_once_a_listing_reaches_its_index() -> None:
    act = _actuator()
    asked = time.monotonic()
    act._pending["r-1"] = Pending(_start("r-1"), done_at=asked + 1.0, index=40)
    assert _in_overlay(act, asked, 39) == {"r-1"}  # asked for before, and at an older index
    assert act.unsettled_since() == 0.0
    assert _in_overlay(act, asked, 40) == set()  # the listing shows it
    assert act.backlog() == 0


def test_a_failed_register_counts_until_a_listing_asked_for_after_it() -> None:
    act = _actuator()
    asked = time.monotonic()
    done = asked + 1.0
    act._pending["r-2"] = Pending(_start("r-2"), done_at=done, index=None)
    assert act.unsettled_since() == done  # the builder then reads instead of a watch's answer
    assert _in_overlay(act, asked, 10**9) == {"r-2"}  # may or may not have been applied
    assert _in_overlay(act, done + 0.1, 0) == set()
    assert act.unsettled_since() == 0.0


def test_a_register_in_flight_counts_whatever_the_listing() -> None:
    act = _actuator()
    act._pending["r-3"] = Pending(_start("r-3"))
    assert _in_overlay(act, time.monotonic() + 60, 10**9) == {"r-3"}
    assert act.backlog() == 1
