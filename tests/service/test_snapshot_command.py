"""`llm-scheduler snapshot` against the stand-ins prints a snapshot `plan --snapshot` accepts."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import LAYOUT, model_value, put
from typer.testing import CliRunner

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.cli import app
from scheduler.core.validate import parse_snapshot


def test_snapshot_command_round_trips(cluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 3})
    put(cluster, LAYOUT.model_key("bad"), "{")
    monkeypatch.setenv("NOMAD_ADDR", cluster.nomad_url)
    monkeypatch.setenv("CONSUL_HTTP_ADDR", cluster.consul_url)
    result = CliRunner().invoke(app, ["snapshot"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    snap = parse_snapshot(json.loads(text[text.index("{") :]))
    assert [m.name for m in snap.models] == ["llama"]
    assert snap.demand["llama"].inflight == 3
    assert {n.id for n in snap.nodes} == {"node-h1", "node-h2", "node-m1"}
    mig = next(n for n in snap.nodes if n.id == "node-m1").gpus[0]
    assert mig.mig and {s.profile for s in mig.mig} == {"3g.40gb"}
    assert snap.settings.min_lifetime_s == 0
