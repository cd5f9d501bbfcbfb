"""Saved what-if files are a contract (fields may be added, none renamed): `plan --snapshot`
reads a snapshot saved before models had `serve`, and says on stderr what it converted."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from scheduler.cli import app

NODE = {
    "id": "n1",
    "name": "a",
    "cpu_cores": 8,
    "memory_gb": 64,
    "gpus": [{"id": "G0", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80}],
}
# A model as snapshots wrote it before `serve` (git log -S params: runtime and params).
OLD_MODEL = {
    "name": "llama",
    "owner": "org/a",
    "class": "standard",
    "scaling": {"min": 1, "max": 1},
    "profiles": [{"name": "one", "gpus": 1}],
    "runtime": "sglang",
    "params": {"hf_model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": "8192"},
}


def _plan(tmp_path: Path, snapshot: dict[str, object]) -> tuple[int, str, str]:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    done = CliRunner().invoke(app, ["plan", "--snapshot", str(path)])
    return done.exit_code, done.stdout, done.stderr


def test_a_snapshot_from_before_serve_is_read_and_the_conversion_said(tmp_path: Path) -> None:
    code, out, err = _plan(
        tmp_path, {"now": "2026-12-03T10:00:00Z", "nodes": [NODE], "models": [OLD_MODEL]}
    )
    assert code == 0, err
    (start,) = json.loads(out)["actions"]
    assert start["model"] == "llama" and start["shards"][0]["gpus"] == ["G0"]
    assert err.splitlines() == [
        "snapshot: saved before `serve`; params and runtime of 1 model(s) (llama) converted "
        "to serve (the decision reads neither)"
    ]


def test_a_current_snapshot_says_nothing_on_stderr(tmp_path: Path) -> None:
    model = {k: v for k, v in OLD_MODEL.items() if k not in ("params", "runtime")}
    code, out, err = _plan(
        tmp_path, {"now": "2026-12-03T10:00:00Z", "nodes": [NODE], "models": [model]}
    )
    assert code == 0 and err == "" and json.loads(out)["actions"]


def test_the_conversion_keeps_what_serve_can_say() -> None:
    from scheduler.core.validate import parse_snapshot, upgrade_snapshot

    data, notes = upgrade_snapshot({"now": "2026-12-03T10:00:00Z", "models": [OLD_MODEL]})
    snap = parse_snapshot(data)
    serve = snap.models[0].serve
    assert serve is not None and serve.runtime == "sglang"
    assert serve.source == "meta-llama/Llama-3.1-8B-Instruct" and len(notes) == 1
