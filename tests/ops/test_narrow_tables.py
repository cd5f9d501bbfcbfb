"""At 80 columns `status`, `models list` and `quotas list` never cut or split a name or a
timestamp: the reason columns wrap, and when even that cannot fit, one line per item."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from scheduler.cli import app

PREFIX = "narrow-test/"
STAMP = "2026-12-05T06:00:00Z"
REASON = "short on 6 nodes: no free 1g.10gb slice on any node, and 2 nodes draining"


def _run(*args: str, width: int = 80) -> Any:
    return CliRunner().invoke(app, [*args, "--prefix", PREFIX], env={"COLUMNS": str(width)})


def _whole(out: str, word: str) -> None:
    """`word` appears, unbroken, on one line; and rich shortened nothing."""
    assert any(word in line for line in out.splitlines()), out
    assert "…" not in out, out


def _status(consul_kv: Any, name: str) -> None:
    record = {"desired": 3, "live": 1, "pending": REASON, "updated_at": STAMP,
              "replicas": [{"id": "r-1", "state": "running"}], "last_error": "x " * 30}  # fmt: skip
    consul_kv.kv.put(f"{PREFIX}status/{name}", json.dumps(record))


@pytest.fixture
def clean(consul_kv: Any) -> Any:
    consul_kv.kv.delete(PREFIX, recurse=True)
    return consul_kv


@pytest.mark.parametrize("width", [80, 110])
def test_status_wraps_the_reason_and_keeps_names_and_times_whole(clean: Any, width: int) -> None:
    names = ["embed-small-multilingual-e5", "llama-3-70b"]
    for name in names:
        _status(clean, name)
    result = _run("status", width=width)
    assert result.exit_code == 0, result.output
    for word in [*names, STAMP]:
        _whole(result.stdout, word)
    if width == 110:
        assert "┃" in result.stdout  # a table, whose reason column wraps
        assert max(len(line) for line in result.stdout.splitlines()) <= width


def test_status_falls_back_to_one_model_at_a_time(clean: Any) -> None:
    name = "a-very-long-model-name-that-leaves-no-room-for-the-other-columns"
    _status(clean, name)
    result = _run("status")
    assert result.exit_code == 0, result.output
    for word in (name, STAMP):
        _whole(result.stdout, word)
    assert f"{name}: 1 replica live, 3 wanted (1 running), updated {STAMP}" in result.stdout
    assert "┃" not in result.stdout
    said = re.sub(r"\s+", " ", result.stdout)
    assert f"pending: {REASON}" in said


def test_models_and_quotas_list_never_cut_a_name(clean: Any) -> None:
    names = ["embed-small-multilingual-e5", "a-very-long-model-name-that-leaves-no-room-at-all"]
    for name in names:
        model = {"name": name, "owner": "org/team-with-a-long-name", "class": "opportunistic",
                 "profiles": [{"name": "mig-1g", "mig_profile": "1g.10gb"}],
                 "serve": {"source": "org/x"}}  # fmt: skip
        clean.kv.put(f"{PREFIX}models/{name}", json.dumps(model))
    quota = json.dumps({"guarantee": {"gpus": 2}})
    clean.kv.put(f"{PREFIX}quotas/org/team-with-a-long-name", quota)
    result = _run("models", "list")
    assert result.exit_code == 0, result.output
    for word in [*names, "org/team-with-a-long-name"]:
        _whole(result.stdout, word)
    result = _run("quotas", "list")
    assert result.exit_code == 0, result.output
    _whole(result.stdout, "org/team-with-a-long-name")
