"""`status` and `why` show a model's expected time to ready from the time-to-ready state key,
in words and with --json; a bad part of that key is named, and the records still show."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from scheduler.cli import app

PREFIX = "ready-test/"
EXPECTED = {"warm_s": 40.0, "cold_s": 360.0, "warm_nodes": ["gpu-h100-3"], "learned": {"warm": 2}}
SENTENCE = "warm on gpu-h100-3: about 40 s; cold elsewhere: about 6 min (learned from 2 starts)"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--prefix", PREFIX], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def _put(consul_kv: object, expected: object) -> None:
    put = consul_kv.kv.put  # type: ignore[attr-defined]
    record = {"desired": 1, "live": 1, "replicas": [], "last_error": None}
    put(PREFIX + "status/llama", json.dumps(record))
    put(PREFIX + "status/tiny", json.dumps(record))
    put(PREFIX + "state/time-to-ready", json.dumps({"models": {}, "expected": expected}))


def test_status_and_why_show_the_expected_time_to_ready(consul_kv: object) -> None:
    _put(consul_kv, {"llama": EXPECTED})
    code, out = _run("status", "--json")
    assert code == 0, out
    models = json.loads(out)["models"]
    assert models["llama"]["time_to_ready"] == EXPECTED
    assert models["tiny"]["time_to_ready"] is None
    code, out = _run("status")
    assert code == 0 and f"llama time to ready: {SENTENCE}" in " ".join(out.split())
    code, out = _run("why", "llama", "--json")
    assert code == 0 and json.loads(out)["time_to_ready"] == EXPECTED
    code, out = _run("why", "llama")
    assert code == 0 and f"time to ready: {SENTENCE}" in " ".join(out.split())


def test_a_bad_expected_time_is_named_and_the_records_still_show(consul_kv: object) -> None:
    _put(consul_kv, {"llama": {"warm_s": "soon"}, "tiny": EXPECTED})
    code, out = _run("status", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["models"]["llama"]["time_to_ready"] is None
    assert data["models"]["tiny"]["time_to_ready"] == EXPECTED
    [line] = data["unreadable"]
    assert line.startswith(PREFIX + "state/time-to-ready: expected.llama: ")


def test_status_and_why_say_where_a_models_weights_are_kept(consul_kv: object) -> None:
    prefetch = {
        "wanted": 3,
        "cached": ["gpu-1", "gpu-2"],
        "running": [],
        "failed": ["gpu-4"],
        "short": "1 more: no other node with a model cache, room and a fitting profile",
        "short_code": "prefetch_no_node",
        "last_error": None,
    }
    _put(consul_kv, {})
    record = {"desired": 0, "live": 0, "replicas": [], "last_error": None, "prefetch": prefetch}
    consul_kv.kv.put(PREFIX + "status/llama", json.dumps(record))  # type: ignore[attr-defined]
    said = "weights on gpu-1, gpu-2 (2 of 3); failed on gpu-4; 1 more: no other node with a"
    code, out = _run("status")
    assert code == 0 and f"llama prefetch: {said}" in " ".join(out.split()), out
    code, out = _run("why", "llama")
    assert code == 0 and f"prefetch: {said}" in " ".join(out.split()), out
    code, out = _run("why", "llama", "--json")
    assert code == 0 and json.loads(out)["prefetch"]["failed"] == ["gpu-4"]
