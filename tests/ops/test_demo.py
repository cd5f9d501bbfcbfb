"""`llm-scheduler demo` end to end, short and fast: real service, real stand-ins."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from scheduler.demo import catalog, trace
from scheduler.standins.fleet import builtin_fleet


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
    opts = DemoOptions(duration_s=14, speed=4, live=False, plain_every_s=3,
                       log_file=tmp_path / "demo.log")  # fmt: skip
    result = run_demo(opts, console)
    text = out.getvalue()
    assert "dashboard: http://127.0.0.1:" in text
    assert "demand rising" in text and "demand falling" in text
    assert result.stats.passes >= 3
    assert result.stats.starts >= 5, (result.stats, (tmp_path / "demo.log").read_text()[-3000:])
    assert result.stats.max_utilisation > 0.3
    assert result.gpus_total == 46
    lines = summary_lines(result)
    assert lines[0].startswith("demo finished after")
    assert any("preemptions" in line for line in lines)
