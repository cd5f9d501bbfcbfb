from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from scheduler.cli import app

PREFIX = "status-test/"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--prefix", PREFIX])
    return result.exit_code, result.output


@pytest.fixture
def records(consul_kv: object) -> None:
    put = consul_kv.kv.put  # type: ignore[attr-defined]
    put(
        PREFIX + "status/llama-70b",
        json.dumps(
            {
                "desired": 2, "live": 1,
                "pending": "profile tp4: no node with 4 free H100 GPUs (6 nodes short of GPUs)",
                "replicas": [{"id": "r-1", "state": "running", "nodes": ["n1"], "devices": ["G1"]}],
                "last_error": None, "updated_at": "2026-12-02T10:00:00Z",
                "tried": [
                    {"profile": "tp4", "short": {"gpus": 6, "gpu_model": 0}},
                    {"profile": "mig", "short": {"mig_profile": 1}, "note": "no 3g.40gb free"},
                    {"profile": "tp2", "short": {"gpu-count": 3, "node-resources": 5},
                     "reasons": {"gpu-count": {"too few free GPUs": 3},
                                 "node-resources": {"too few free CPU cores": 4,
                                                    "too little free memory": 1}}},
                ],
            }
        ),
    )  # fmt: skip
    put(
        PREFIX + "status/tiny-1b",
        json.dumps({"desired": 1, "live": 1, "pending": None, "replicas": [], "last_error": None}),
    )
    put(PREFIX + "status/_errors", json.dumps({"errors": ["models/x: bad class"]}))
    put(PREFIX + "status/broken", "not json")


def test_status_lists_every_model_from_the_records(records: None) -> None:
    code, out = _run("status", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert sorted(data["models"]) == ["llama-70b", "tiny-1b"]
    assert data["models"]["llama-70b"]["desired"] == 2
    assert data["models"]["llama-70b"]["live"] == 1
    assert data["errors"] == ["models/x: bad class"]
    assert data["unreadable"] == [PREFIX + "status/broken: not JSON"]
    code, out = _run("status")
    assert code == 0 and "llama-70b" in out and "1 running" in out


def test_why_explains_each_profile_from_the_record(records: None) -> None:
    code, out = _run("why", "llama-70b")
    assert code == 0, out
    assert "1 replica live, 2 wanted (status record)" in out
    assert "no node with 4 free H100 GPUs" in out
    assert "tried tp4: gpus on 6 nodes, gpu_model on 0 nodes" in out
    assert "tried mig: mig_profile on 1 node (no 3g.40gb free)" in out
    # Counted by filter name, said in the filters' words, each with its nodes.
    assert (
        "tried tp2: too few free GPUs on 3 nodes (gpu-count), too few free CPU cores on 4 "
        "nodes, too little free memory on 1 node (node-resources)"
    ) in out
    code, out = _run("why", "tiny-1b", "--json")
    assert json.loads(out)["pending"] is None


def test_status_against_a_missing_consul_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "127.0.0.1:9")
    code, out = _run("status")
    assert code == 1
    assert "cannot reach Consul at http://127.0.0.1:9: start it or set CONSUL_HTTP_ADDR" in out


def test_why_and_dry_run_decide_on_the_live_cluster(
    consul_kv: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("scheduler.core.decide", reason="the decision core is not in this tree yet")
    live = "live-test/"
    monkeypatch.setenv("LLM_SCHEDULER_KV_PREFIX", live)
    put = consul_kv.kv.put  # type: ignore[attr-defined]
    huge = {"name": "huge", "owner": "org/a", "class": "critical", "scaling": {"min": 1, "max": 1},
            "profiles": [{"name": "tp16", "gpus": 16}], "serve": {"source": "o/h"}}  # fmt: skip
    small = {"name": "small", "owner": "org/a", "scaling": {"min": 1, "max": 1},
             "profiles": [{"name": "one", "gpus": 1}], "serve": {"source": "o/s"}}  # fmt: skip
    put(live + "models/huge", json.dumps(huge))
    put(live + "models/small", json.dumps(small))

    result = CliRunner().invoke(app, ["dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    starts = [a for a in plan["actions"] if a["op"] == "start"]
    assert [a["model"] for a in starts] == ["small"]
    assert plan["models"]["huge"]["pending"]

    result = CliRunner().invoke(app, ["why", "huge", "--json"])
    assert result.exit_code == 0, result.output
    why = json.loads(result.output)
    assert why["source"] == "live decision" and why["pending"] == plan["models"]["huge"]["pending"]
    result = CliRunner().invoke(app, ["why", "nope"])
    assert result.exit_code == 1 and "nope is not in the catalog" in result.output


def test_why_says_which_signal_set_the_count(consul_kv: object) -> None:
    """The status record's `why` is shown by `why MODEL`, text and JSON."""
    put = consul_kv.kv.put  # type: ignore[attr-defined]
    why = "3 replicas: ttft p90 840 ms > 500 ms objective (queue 2/5, kv 0.41/0.80)"
    record = {"desired": 3, "live": 3, "pending": None, "why": why, "replicas": []}
    put(PREFIX + "status/chat", json.dumps(record))
    code, out = _run("why", "chat")
    assert code == 0, out
    assert f"scaling: {why}" in out.replace("\n", " ")
    code, out = _run("why", "chat", "--json")
    assert code == 0 and json.loads(out)["why"] == why


def test_why_and_status_show_the_codes_and_a_replica_stopped_past_its_load_grace(
    consul_kv: object,
) -> None:
    put = consul_kv.kv.put  # type: ignore[attr-defined]
    reason = "still starting after 1900s, past its load grace of 1800s"
    record = {
        "desired": 1, "live": 0, "pending": "held one more pass after yielding to chat",
        "pending_code": "held", "replicas": [], "tried": [],
        "timed_out": [{"replica": "r-9", "code": "timed_out", "reason": reason}],
    }  # fmt: skip
    put(PREFIX + "status/slow", json.dumps(record))
    code, out = _run("why", "slow")
    assert code == 0, out
    flat = out.replace("\n", " ")
    assert "pending (held):" in flat
    assert f"stopped r-9 (timed_out): {reason}" in flat
    code, out = _run("why", "slow", "--json")
    data = json.loads(out)
    assert data["pending_code"] == "held"
    assert data["timed_out"] == [{"replica": "r-9", "code": "timed_out", "reason": reason}]
    code, out = _run("status")
    assert code == 0 and "(held)" in out and "(timed_out)" in out
