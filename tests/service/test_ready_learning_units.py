"""The time-to-ready key is never written over with less than it holds: a leader that could not
read it writes nothing and reads it again on the next pass."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import Snapshot
from scheduler.service.ready_learning import ReadyLearning

LAYOUT = KVLayout()
KEPT = {"models": {"m": {"cold": {"mean_s": 300.0, "count": 4}}}}


class FlakyKV:
    def __init__(self) -> None:
        self.down = True

    def get(self, key: str) -> tuple[int, dict[str, Any] | None]:
        if self.down:
            raise OSError("connection refused")
        return 1, {"Key": key, "Value": json.dumps(KEPT).encode()}


def test_an_unread_key_is_not_written_over_and_is_read_again() -> None:
    kv, written = FlakyKV(), []
    service = SimpleNamespace(
        layout=LAYOUT,
        consul=SimpleNamespace(kv=kv),
        leader=SimpleNamespace(is_leader=True),
        status=SimpleNamespace(write=lambda key, record, at: written.append((key, record))),
    )
    ready = ReadyLearning()
    ready.attach(service)
    snap = Snapshot(now=datetime(2026, 12, 5, tzinfo=UTC))
    ready.pass_finished(snap, None, 0.0, [])  # type: ignore[arg-type]
    assert written == []
    kv.down = False
    ready.pass_finished(snap, None, 0.0, [])  # type: ignore[arg-type]
    [(key, record)] = written
    assert key == LAYOUT.time_to_ready and record["models"] == KEPT["models"]
