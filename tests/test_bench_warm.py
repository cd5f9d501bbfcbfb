"""bench/warm_starts.py at a tiny size: its simulated caches and prefetch jobs, and its three
sides (off, cache-aware placement, placement and prefetch) in one run."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import fleetgen, warm_prefetch, warm_starts  # noqa: E402
from scheduler.core.prefetch_records import PrefetchAction  # noqa: E402


def test_a_simulated_cache_evicts_the_least_recently_used_weights_not_in_use() -> None:
    gb, t = warm_starts.GB, fleetgen.NOW
    vol = warm_starts.NodeVolume(100 * gb)
    assert vol.keep("org/a", 40 * gb, t, set()) and vol.keep("org/b", 40 * gb, t, set())
    later = t.replace(minute=5)
    vol.held["org/a"] = (40 * gb, later)  # a used since: b is the least recently used
    assert vol.keep("org/c", 40 * gb, later, set())
    assert set(vol.held) == {"org/a", "org/c"}
    assert not vol.keep("org/d", 80 * gb, later, {"org/a", "org/c"})  # both run: no room
    assert vol.report({"org/a"}).free_bytes == 60 * gb


def test_a_simulated_prefetch_fills_its_node_cache_once_downloaded_and_a_stop_keeps_nothing() -> (
    None
):
    gb, t = warm_starts.GB, fleetgen.NOW
    vols = {"n0": warm_starts.NodeVolume(100 * gb), "n1": warm_starts.NodeVolume(100 * gb)}
    jobs = warm_prefetch.Prefetching({"org/a": 50 * gb}, download_bps=1 * gb)

    def keep(node: str, source: str, size: int, when: datetime, in_use: set[str]) -> bool:
        return vols[node].keep(source, size, when, in_use)

    def start(node: str) -> PrefetchAction:
        return PrefetchAction(op="start", model="a", node=node, reason="", code="prefetch_ahead")

    jobs.apply([start("n0"), start("n1")], t, 0)
    (first, second) = jobs.records()
    jobs.apply(
        [
            PrefetchAction(
                op="stop", model="a", node="n1", reason="", code="prefetch_yields", id=second.id
            )
        ],
        t + timedelta(seconds=10),
        1,
    )
    unused: dict[str, set[str]] = {"n0": set(), "n1": set()}
    jobs.finish(t + timedelta(seconds=49), keep, unused)
    assert "org/a" not in vols["n0"].held and jobs.records() == [first]  # still downloading
    jobs.finish(t + timedelta(seconds=50), keep, unused)
    assert "org/a" in vols["n0"].held and "org/a" not in vols["n1"].held
    assert jobs.records() == [] and jobs.downloaded == 60 * gb  # 50 done, 10 of the stopped


def test_warm_starts_script_prints_sane_json(capsys: pytest.CaptureFixture[str]) -> None:
    warm_starts.main(
        [
            *("--nodes", "4", "--on-demand", "4", "--step-s", "600", "--warmup-days", "0"),
            *("--volumes-gb", "200"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    (run,) = out["runs"]
    for side in warm_starts.MODES:
        starts = run[side]["all_starts"]
        assert starts["starts"] >= run[side]["from_zero"]["starts"] > 0
        assert 0 <= starts["warm_share"] <= 1
        assert 20 < starts["p50_s"] <= starts["p95_s"]
        assert run[side]["downloaded_gb"] >= run[side]["prefetched"]["gb"]
    assert set(run["off_over"]) == {"placement", "placement_prefetch"}
    # Only the whole feature prefetches, and what it fetches counts as downloaded.
    assert run["placement"]["prefetched"]["jobs"] == 0
    assert run["placement_prefetch"]["prefetched"]["jobs"] > 0
    assert run["placement_prefetch"]["prefetched"]["gb"] > 0
