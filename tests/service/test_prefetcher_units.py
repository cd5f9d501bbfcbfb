"""The prefetcher: calls in flight stand in the next snapshots (a start as a running prefetch, a
stop as gone) until a read after them; a prefetch job that cannot be made is reported per model
and retried only after a backoff (against the Nomad stand-in's parse on loopback)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.adapters.job_maker import JobMaker
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.core.models import Model, Node, Snapshot
from scheduler.core.prefetch_records import Prefetch, PrefetchAction
from scheduler.service.prefetcher import Prefetcher

NOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
NODE = Node(id="n-1", name="gpu-1", cpu_cores=32, memory_gb=256, host_volumes=["llm-model-cache"])
MODEL = Model.model_validate(
    {
        "name": "m",
        "owner": "org/a",
        "profiles": [{"name": "p", "gpus": 1}],
        "serve": {"source": "org/m", "prefetch": 1},
    }
)
START = PrefetchAction(op="start", model="m", node="n-1", code="prefetch_ahead", reason="r")


@pytest.fixture
def api() -> Iterator[NomadAPI]:
    standin = NomadStandin(builtin_fleet()[:1], load_delay_s=0.0)
    standin.start()
    assert standin._server is not None
    yield NomadAPI(standin._server.url)
    standin.stop()


def _inline(calls: list[str]) -> Callable[[Callable[[], None]], object]:
    def submit(call: Callable[[], None]) -> object:
        calls.append("call")
        call()
        return None

    return submit


def test_calls_in_flight_stand_in_the_next_snapshots(api: NomadAPI) -> None:
    prefetcher = Prefetcher(api, JobMaker(api, namespace=None, images={}))
    held: list[Callable[[], None]] = []
    prefetcher.act([START], {"m": MODEL}, {"n-1": NODE}, NOW, held.append)
    old = Prefetch(id="llm-prefetch-m-n-0", model="m", node="n-0", source="org/m")
    stop = PrefetchAction(
        op="stop", model="m", node="n-0", id=old.id, code="prefetch_yields", reason="r"
    )
    prefetcher.act([stop], {"m": MODEL}, {}, NOW, held.append)
    snap = Snapshot(now=NOW, prefetches=[old])
    seen = prefetcher.overlay(snap, time.monotonic())
    assert [(p.id, p.state) for p in seen.prefetches] == [("llm-prefetch-m-n-1", "running")]
    for call in held:
        call()
    assert prefetcher.overlay(snap, time.monotonic() - 60).prefetches != snap.prefetches
    assert prefetcher.overlay(snap, time.monotonic() + 1) == snap  # a read after them saw them


def test_a_job_that_cannot_be_made_is_reported_and_retried_after_a_backoff(
    api: NomadAPI, tmp_path: Path
) -> None:
    (tmp_path / "prefetch.nomad.hcl").write_text('job "x" {\n  group {\n')  # does not parse
    clock = [100.0]
    maker = JobMaker(api, namespace=None, images={}, jobspec_dir=str(tmp_path))
    prefetcher = Prefetcher(api, maker, clock=lambda: clock[0])
    calls: list[str] = []
    prefetcher.act([START], {"m": MODEL}, {"n-1": NODE}, NOW, _inline(calls))
    assert prefetcher.errors["m"].startswith("prefetch start on n-1: template ")
    prefetcher.overlay(Snapshot(now=NOW), time.monotonic() + 1)  # the call was seen
    prefetcher.act([START], {"m": MODEL}, {"n-1": NODE}, NOW, _inline(calls))
    assert calls == ["call"]  # backing off
    clock[0] += 31
    prefetcher.act([START], {"m": MODEL}, {"n-1": NODE}, NOW, _inline(calls))
    assert calls == ["call", "call"]
