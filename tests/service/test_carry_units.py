"""The carry-over's pieces that need no cluster: the scale-down marks of carried
passes (recorded lazily, the latest one standing for all) and when a kept pass may stand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.adapters.catalog import Catalog
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.snapshot_builder import ClusterView, SnapshotBuilder
from scheduler.core.models import DesiredMark, Model, ModelStatus, Plan, Settings, Snapshot
from scheduler.service.carry import CarryOver, Inputs, Kept

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
WINDOW = 300


def _snapshot(now: datetime) -> Snapshot:
    model = Model.model_validate(
        {
            "name": "m",
            "owner": "org/a",
            "class": "standard",
            "scaling": {"min": 0, "max": 8},
            "profiles": [{"name": "p", "gpus": 1}],
        }
    )
    return Snapshot(now=now, settings=Settings(scale_down_window_s=WINDOW), models=[model])


def _plan(recommended: int) -> Plan:
    return Plan(models={"m": ModelStatus(desired=recommended, live=0, recommended=recommended)})


def _builder() -> SnapshotBuilder:
    none: Any = None  # no reads in these tests
    return SnapshotBuilder(none, none, KVLayout())


def _window_view(marks: list[DesiredMark], now: datetime) -> tuple[int, bool]:
    """What scaling.want reads of the marks at `now`: the highest count inside the window,
    and whether the window has been watched whole."""
    start = now - timedelta(seconds=WINDOW)
    return max([0, *(m.count for m in marks if m.at > start)]), any(m.at <= start for m in marks)


def test_carried_marks_recorded_lazily_read_as_one_mark_a_pass() -> None:
    """Full pass at T0 asks 4, passes carried every 10 s until T0+280 (asking 4 too), a full
    pass at T0+290 asks 2: every later window sees what it would with a mark every pass."""
    every, lazy = _builder(), _builder()
    for b in (every, lazy):
        b.remember(_snapshot(T0), _plan(4))
    for s in range(10, 290, 10):
        at = T0 + timedelta(seconds=s)
        every.remember(_snapshot(at), _plan(4))
        lazy.remember_carried(_snapshot(T0), _plan(4), at)  # the kept snapshot, as carried
    later = T0 + timedelta(seconds=290)
    for b in (every, lazy):
        b.remember(_snapshot(later), _plan(2))
    for s in range(290, 900, 5):
        now = T0 + timedelta(seconds=s)
        assert _window_view(lazy.memory.marks["m"], now) == _window_view(
            every.memory.marks["m"], now
        ), s
    # Without the carried passes' mark, the window would forget the 4 at T0+300 (too early).
    assert _window_view(lazy.memory.marks["m"], T0 + timedelta(seconds=400))[0] == 4
    assert len(lazy.memory.marks["m"]) < len(every.memory.marks["m"])


def _kept(until: datetime | None) -> Kept:
    view = ClusterView(_snapshot(T0), {}, [], Catalog(), set(), set())
    return Kept(view, _plan(1), Inputs((("w", 1),), (True, 0), 0), until)


def test_a_kept_pass_stands_only_for_equal_inputs_and_before_its_calm_until() -> None:
    carry = CarryOver()
    kept = _kept(T0 + timedelta(seconds=60))
    carry.keep(kept)
    same = Inputs((("w", 1),), (True, 0), 0)
    assert carry.reuse(same, T0 + timedelta(seconds=59)) is kept
    assert carry.reuse(same, T0 + timedelta(seconds=60)) is None  # the clock got there
    assert carry.reuse(None, T0) is None  # something could not be vouched for
    assert carry.reuse(Inputs((("w", 2),), (True, 0), 0), T0) is None  # a watch moved
    assert carry.reuse(Inputs((("w", 1),), (True, 1), 0), T0) is None  # leadership changed
    assert carry.reuse(Inputs((("w", 1),), (True, 0), 1), T0) is None  # an action finished
    assert carry.carried == 1
    carry.keep(_kept(None))
    assert carry.reuse(same, T0 + timedelta(days=365)) is not None  # calm for good


def test_inputs_vouch_for_nothing_with_a_failing_or_stale_watch_or_a_busy_actuator() -> None:
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

    # Nothing listens there: nothing here reads.
    svc = Service(ServiceConfig(nomad_addr="http://127.0.0.1:9", consul_addr="127.0.0.1:9"))
    assert svc._inputs() is None  # no watches: one-shot use, never carried over
    svc.watches = svc._watches()  # not started
    assert "consul-kv" in [w.name for w in svc.watches]  # the whole prefix is watched
    inputs = svc._inputs()
    assert inputs is not None and svc._inputs() == inputs
    watch = svc.watches[0]
    watch.last_error = "ConsulError: 500"
    assert svc._inputs() is None
    watch.last_error = None
    watch.last_ok -= svc.config.http_timeout(svc.config.watch_wait_s) + 1  # a hung query
    assert svc._inputs() is None
    watch.last_ok += svc.config.http_timeout(svc.config.watch_wait_s) + 1
    watch.version += 1  # an answer at a new index
    assert svc._inputs() not in (None, inputs)
    svc._leadership(True)
    assert svc._inputs() != inputs
    svc.actuator._pending["r-1"] = object()  # type: ignore[assignment]  # in flight
    assert svc._inputs() is None


def test_the_dashboard_counts_a_carried_pass_and_keeps_its_picture() -> None:
    from scheduler.ops.dashboard import DashboardObserver

    dash = DashboardObserver()
    dash.pass_finished(_snapshot(T0), _plan(1), 0.2, [])
    before = dash.state()
    dash.pass_carried(0.0001, [])
    after = dash.state()
    assert after["passes"] == before["passes"] + 1
    assert after["last_pass_s"] == 0.0001
    assert after["models"] == before["models"]  # the picture of the last full pass stands
