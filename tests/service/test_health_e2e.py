"""Failed passes are counted and logged whole; /healthz tells the truth."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stderr
from typing import Any

import httpx
import pytest
from e2e_helpers import LAYOUT, model_value, put, service_config, wait_for

import scheduler.service.loop as loop_module
from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.faults import Faults
from scheduler.ops.wiring import Ops, start_ops
from scheduler.service.loop import Service


@pytest.fixture
def ops() -> Iterator[Ops]:
    started = start_ops("127.0.0.1:0")
    try:
        yield started
    finally:
        started.stop()


def _healthz(ops: Ops) -> tuple[int, dict[str, Any]]:
    assert ops.server is not None
    resp = httpx.get(ops.server.url + "/healthz", timeout=5)
    return resp.status_code, resp.json()


def _errors(ops: Ops, kind: str) -> float:
    value = ops.metrics.registry.get_sample_value("llm_scheduler_errors_total", {"kind": kind})
    return value or 0.0


def test_a_pass_that_raises_is_counted_logged_whole_and_turns_healthz_red(
    cluster: DevCluster, ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.service.logs import configure_logging

    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
    svc = Service(service_config(cluster), observers=ops.observers)
    real_decide = loop_module.decide

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    buf = io.StringIO()
    svc.run_in_thread()
    try:
        wait_for(lambda: svc.passes >= 1 and svc.leader.is_leader, what="a first pass")
        code, body = _healthz(ops)
        assert (code, body["ok"], body["leader"]) == (200, True, True)
        with redirect_stderr(buf):
            configure_logging("json")
            monkeypatch.setattr(loop_module, "decide", broken)
            # A quiet pass is carried over without deciding: a change makes the
            # next one decide, and a pass that fails keeps nothing to carry over.
            put(cluster, LAYOUT.demand_key("llama"), {"inflight": 1})
            wait_for(lambda: svc.failures_in_a_row >= 3, what="three failed passes")
            code, body = _healthz(ops)
            configure_logging("console")
        assert code == 503 and not body["ok"]
        assert any("OverflowError: cannot convert float infinity" in r for r in body["reasons"])
        assert _errors(ops, "pass") >= 3
        lines = [json.loads(x) for x in buf.getvalue().splitlines() if '"pass_failed"' in x]
        assert lines, buf.getvalue()[-2000:]
        exc = lines[0]["exception"][0]  # structlog's dict traceback: type, value, frames
        assert exc["exc_type"] == "OverflowError"
        assert any(f["name"] == "broken" for f in exc["frames"])
        monkeypatch.setattr(loop_module, "decide", real_decide)
        wait_for(lambda: _healthz(ops)[0] == 200, what="healthy again")
    finally:
        svc.stop()


def test_unreachable_consul_turns_healthz_red_with_the_reason(ops: Ops) -> None:
    from e2e_helpers import small_fleet

    faults = Faults(seed=3)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        svc = Service(
            service_config(dc, watch_wait_s=1.0, http_margin_s=0.5), observers=ops.observers
        )
        svc.run_in_thread()
        try:
            wait_for(lambda: svc.passes >= 1, what="a first pass")
            assert _healthz(ops)[0] == 200
            faults.set("/v1/kv/", error_rate=1.0)
            _, body = wait_for(
                lambda: (
                    (r := _healthz(ops))[0] == 503
                    and "watch models stale" in "".join(r[1]["reasons"])
                    and r
                ),
                timeout=30,
                what="healthz 503 for failed reads and stale watches",
            )
            assert "passes in a row failed: read failed" in "\n".join(body["reasons"])
            assert _errors(ops, "read") >= 3
            faults.clear()
            wait_for(lambda: _healthz(ops)[0] == 200, timeout=30, what="healthy again")
        finally:
            svc.stop()


class _BuggyFilter:
    name = "buggy-zone"
    static = False

    def filter(self, ctx: object, node: object, choice: object) -> str | None:
        raise KeyError("zone")


def test_a_plugin_that_raises_is_counted_named_in_healthz_and_the_passes_go_on(
    cluster: DevCluster, ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler import plugins

    monkeypatch.setattr(
        plugins, "load_group", lambda g: {"z": _BuggyFilter} if g == plugins.FILTERS else {}
    )
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 1})  # something to place
    svc = Service(service_config(cluster), observers=ops.observers)
    svc.run_in_thread()
    try:
        wait_for(lambda: svc.passes >= 1 and svc.leader.is_leader, what="a first pass")
        wait_for(lambda: _errors(ops, "plugin") >= 1, what="the plugin's failure counted")
        code, body = _healthz(ops)
        # The passes go on (nothing placed where the filter could not say yes): not a reason
        # to restart, and named as it is.
        assert code == 200 and body["ok"] and body["failures_in_a_row"] == 0
        assert body["plugins_failing"] == ["buggy-zone: KeyError('zone')"]
        assert _errors(ops, "pass") == 0
    finally:
        svc.stop()
