"""The reporter reads the model cache with huggingface_hub's scanner: complete snapshots only,
their revisions, bytes, weights (the safetensors index) and last use, and the free bytes."""

from __future__ import annotations

import json
from pathlib import Path

from llm_scheduler_standins.fleet_model import CachedWeights, ModelCache
from llm_scheduler_standins.model_cache import GB, repo_folder, write_hub_cache
from scheduler.reporter.cache_scan import INDEX, scan_model_cache

A, B = "a" * 40, "b" * 40


def _cache(tmp_path: Path, *weights: CachedWeights, index: bool = True) -> Path:
    write_hub_cache(tmp_path / "hub", ModelCache(weights=list(weights)), index=index)
    return tmp_path


def test_complete_snapshots_with_their_facts(tmp_path: Path) -> None:
    home = _cache(
        tmp_path,
        CachedWeights(source="org/m", commit=A, bytes=30 * GB, last_used=1_760_000_000),
        CachedWeights(source="org/n", revision="v1", commit=B, bytes=2 * GB),
    )
    report = scan_model_cache(home, "llm-model-cache")
    assert report.volume == "llm-model-cache" and report.free_bytes and not report.errors
    m, n = report.snapshots
    assert (m.source, m.commit, m.revisions, m.weights_bytes) == ("org/m", A, ["main"], 30 * GB)
    assert m.bytes >= 30 * GB
    assert m.last_used is not None and m.last_used.timestamp() == 1_760_000_000
    assert (n.source, n.revisions) == ("org/n", ["v1"])


def test_without_an_index_the_weights_are_unknown(tmp_path: Path) -> None:
    home = _cache(tmp_path, CachedWeights(source="org/m", commit=A, bytes=GB), index=False)
    (snapshot,) = scan_model_cache(home, "v").snapshots
    assert snapshot.weights_bytes is None and snapshot.bytes == GB


def test_a_repository_with_incomplete_blobs_has_no_complete_snapshot(tmp_path: Path) -> None:
    home = _cache(tmp_path, CachedWeights(source="org/m", commit=A, bytes=GB))
    blobs = repo_folder(home / "hub", "org/m") / "blobs"
    (blobs / ("f" * 64 + ".0a1b2c3d.incomplete")).write_bytes(b"half")
    assert scan_model_cache(home, "v").snapshots == []


def test_a_snapshot_missing_a_shard_of_its_index_is_not_complete(tmp_path: Path) -> None:
    home = _cache(tmp_path, CachedWeights(source="org/m", commit=A, bytes=GB))
    snapshot = repo_folder(home / "hub", "org/m") / "snapshots" / A
    index = snapshot / INDEX
    body = {"metadata": {"total_size": GB}, "weight_map": {"a": "model-00002-of-00002.x"}}
    target = index.resolve()
    index.unlink()
    target.write_text(json.dumps(body))
    index.symlink_to(target)
    assert scan_model_cache(home, "v").snapshots == []


def test_no_hub_yet_is_an_empty_cache_with_its_free_bytes(tmp_path: Path) -> None:
    report = scan_model_cache(tmp_path, "v")
    assert report.snapshots == [] and report.free_bytes and not report.errors


def test_a_volume_that_is_gone_is_an_error_not_an_exception(tmp_path: Path) -> None:
    report = scan_model_cache(tmp_path / "unmounted", "v")
    assert report.snapshots == [] and report.free_bytes is None and report.errors


def test_the_reporter_command_reports_the_cache_from_its_setting(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from scheduler.cli import app

    home = _cache(tmp_path, CachedWeights(source="org/m", commit=A, bytes=GB))
    env = {"LLM_SCHEDULER_MODEL_CACHE": str(home)}
    done = CliRunner().invoke(app, ["reporter", "--fake-nvml", "h100", "--once"], env=env)
    assert done.exit_code == 0, done.output
    cache = json.loads(done.stdout)["cache"]
    assert cache["volume"] == "llm-model-cache"
    assert [s["source"] for s in cache["snapshots"]] == ["org/m"]
    bare = CliRunner().invoke(app, ["reporter", "--fake-nvml", "h100", "--once"], env={})
    assert json.loads(bare.stdout)["cache"] is None


def test_a_crowded_cache_reports_the_snapshots_used_last(tmp_path: Path) -> None:
    home = _cache(
        tmp_path,
        *(
            CachedWeights(source=f"org/m{i}", commit=f"{i}" * 40, bytes=GB, last_used=1.7e9 + i)
            for i in range(3)
        ),
    )
    report = scan_model_cache(home, "v", limit=2)
    assert [s.source for s in report.snapshots] == ["org/m1", "org/m2"]
    assert report.errors == ["3 snapshots; reported the 2 used last"]
