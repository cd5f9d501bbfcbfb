"""`llm-scheduler demo` end to end, short and fast: real service, real stand-ins."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from llm_scheduler_standins.fleet import builtin_fleet
from scheduler.demo import catalog, trace


def test_catalog_has_all_classes_two_tenants_and_a_peak_past_capacity() -> None:
    assert {m.class_ for m in catalog.MODELS} == {"critical", "standard", "opportunistic"}
    assert len(catalog.MODELS) >= 10
    assert len({m.owner for m in catalog.MODELS}) == 2
    assert all(q.limit is not None for q in catalog.QUOTAS)
    whole = sum(1 for n in builtin_fleet() for g in n.gpus if g.mig is None)

    def wanted(t: float) -> int:
        total = 0
        for m in catalog.MODELS:
            d = trace.demand_at(t)[m.name]
            s = m.scaling
            n = min(s.max, max(s.min, math.ceil((d.inflight + d.queued) / s.target_per_replica)))
            p = m.profiles[0]
            total += 0 if p.is_mig else n * p.gpus * p.shards
        return total

    assert wanted(0.0) < whole < wanted(0.5)
    assert wanted(1.0) < wanted(0.5) / 3
    assert [trace.phase(t) for t in (0.1, 0.5, 0.9)] == ["rising", "peak", "falling"]


def test_demo_runs_places_replicas_and_summarises(tmp_path: Path) -> None:
    pytest.importorskip("scheduler.core.decide", reason="the decision core is not in this tree yet")
    from scheduler.demo.runner import DemoOptions, run_demo, summary_lines

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    opts = DemoOptions(duration_s=14, speed=4, live=False, plain_every_s=3)
    result = run_demo(opts, console)
    log = result.log_file.read_text(encoding="utf-8")
    result.log_file.unlink()
    text = out.getvalue()
    # The README's port, or a line that says why not and where instead.
    assert "dashboard: http://127.0.0.1:9464/" in text or "port 9464 is not free" in text
    assert "demand rising" in text and "demand falling" in text
    assert result.stats.passes >= 3
    assert result.stats.starts >= 5, (result.stats, log[-3000:])
    assert result.stats.max_utilisation > 0.3
    assert result.gpus_total == 46
    # One log per run, named by its start; a clean stop: the service (watches included) ends
    # before the stand-ins, so no request is cut off and nothing fails on the way out.
    assert result.log_file.name.startswith("llm-scheduler-demo-20")
    assert '"event": "started"' in log
    for bad in ("Traceback", "CancelledError", "watch_error", "Bad file descriptor"):
        assert bad not in log, log[-3000:]
    lines = summary_lines(result)
    assert lines[0].startswith("demo finished after")
    assert "  critical models:" in lines
    assert any(line.startswith("  preemptions") for line in lines)
    assert any("busiest moment" in line and "of 46 whole GPUs" in line for line in lines)
    assert lines[-1] == f"  service log (this run only): {result.log_file}"


def test_each_run_gets_its_own_log() -> None:
    from scheduler.demo.runner import log_path

    first, second = log_path(None), log_path(None)
    try:
        assert first != second and first.exists() and second.exists()
        assert first.name.startswith("llm-scheduler-demo-") and first.suffix == ".log"
    finally:
        first.unlink()
        second.unlink()
    assert log_path(Path("/x/y.log")) == Path("/x/y.log")


def test_a_taken_dashboard_port_falls_back_with_a_line() -> None:
    import socket

    from scheduler.demo.runner import serve_dashboard
    from scheduler.ops.dashboard import DashboardObserver

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        server, note = serve_dashboard(DashboardObserver(), port=port)
        try:
            assert server.port != port
            assert note is not None and f"port {port} is not free" in note
            assert f"so it is on {server.url}/ instead" in note
        finally:
            server.stop()
    finally:
        busy.close()
    server, note = serve_dashboard(DashboardObserver(), port=port)  # free now: no line
    server.stop()
    assert (server.port, note) == (port, None)


def test_the_summary_tells_who_waited_who_gave_way_and_what_is_left() -> None:
    from datetime import timedelta

    from ops_helpers import preemption, snapshot_and_plan

    from scheduler.core.models import ModelStatus
    from scheduler.demo.view import DemoStats, summary

    stats = DemoStats()
    snap, plan = snapshot_and_plan()  # big-405b (standard) pending; llama-70b critical, served
    short = "profile tp4: no node has 4 free GPUs"
    waiting = plan.model_copy(
        update={"models": {**plan.models, "llama-70b": ModelStatus(desired=2, live=1,
                                                                   pending=short)}}
    )  # fmt: skip
    for i, p in enumerate([waiting, waiting, waiting, plan]):
        at = snap.model_copy(update={"now": snap.now + timedelta(seconds=5 * i)})
        stats.pass_finished(at, p, 0.01, [])
    stats.action_done(preemption(), True, None)
    stats.action_done(preemption(), True, None)
    lines = summary(stats, 20, 46)
    assert "    llama-70b waited 10 s in all, longest 10 s: " + short in lines
    assert "  preemptions (2), who gave way to whom:" in lines
    assert "    tiny-1b (opportunistic) for big-405b (standard) (2 times)" in lines
    assert "  waited longest for room (the others):" in lines
    pending = plan.models["big-405b"].pending
    assert f"    big-405b (standard) 15 s: {pending}" in lines
    assert lines[-2:] == ["  still pending at the end:", f"    big-405b: {pending}"]
    assert "busiest moment: 4 of 46 whole GPUs and 1 of 6 MIG slices in use" in lines[1]


def test_the_summary_tells_a_latency_objective_met_by_scaling_out() -> None:
    """A start for a broken TTFT objective, then a reading within it, make the story."""
    from datetime import UTC, datetime

    from scheduler.core.models import Load, Model, Plan, Snapshot, StartAction
    from scheduler.demo.catalog import MODELS
    from scheduler.demo.view import DemoStats, summary

    qwen: Model = next(m for m in MODELS if m.name == "qwen-2.5-32b")
    assert qwen.scaling.ttft_p90_ms == 500  # the demo's model with a latency objective
    stats = DemoStats()
    reason = "scale up: 2 replicas: ttft p90 586 ms > 500 ms objective (requests 21), 2 of 2"
    start = StartAction(model=qwen.name, profile="tp2", replica="r-1", shards=[], reason=reason)
    stats.action_done(start, True, None)
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    snap = Snapshot(now=now, models=[qwen], load={qwen.name: Load(ttft_p90_ms=229)})
    stats.pass_finished(snap, Plan(), 0.01, [])
    lines = summary(stats, 20, 46)
    assert f"  latency objective: {qwen.name} {reason}" in lines
    assert "    then met it: ttft p90 229 ms <= 500 ms" in lines
