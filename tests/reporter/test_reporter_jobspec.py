"""jobspecs/gpu-reporter.nomad.hcl: a system job that runs `llm-scheduler reporter` per node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hcl2

JOBSPEC = Path(__file__).resolve().parents[2] / "jobspecs" / "gpu-reporter.nomad.hcl"


def _unquote(value: Any) -> Any:
    return value.strip('"') if isinstance(value, str) else value


def test_jobspec_is_a_system_job_running_the_reporter_with_the_node_id() -> None:
    spec = hcl2.loads(JOBSPEC.read_text())
    ((name, job),) = spec["job"][0].items()
    assert _unquote(name) == "llm-gpu-reporter"
    assert _unquote(job["type"]) == "system"
    assert any(_unquote(c["attribute"]) == "${node.class}" for c in job["constraint"])
    ((_, group),) = job["group"][0].items()
    ((_, task),) = group["task"][0].items()
    assert _unquote(task["driver"]) == "raw_exec"
    args = [_unquote(a) for a in task["config"][0]["args"]]
    assert args[:3] == ["reporter", "--node-id", "${node.unique.id}"]
    assert "--ttl" in args and "--interval" in args
    assert "CONSUL_HTTP_ADDR" in task["env"][0]
    assert _unquote(task["kill_signal"]) == "SIGINT"  # lets the reporter destroy its session


def test_nomad_parses_the_jobspec_with_variables() -> None:
    import httpx
    import pytest

    server_mod = pytest.importorskip("llm_scheduler_standins.nomad.server")
    standin = server_mod.NomadStandin([])
    server = standin.start(0)
    try:
        answer = httpx.post(
            server.url + "/v1/jobs/parse",
            json={
                "JobHCL": JOBSPEC.read_text(),
                "Canonicalize": True,
                "Variables": 'consul_addr = "http://10.0.0.1:8500"\nttl_s = 20',
            },
            timeout=10,
        )
    finally:
        standin.stop()
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["Type"] == "system"
    task = job["TaskGroups"][0]["Tasks"][0]
    assert task["Driver"] == "raw_exec"
    assert task["Config"]["args"][:3] == ["reporter", "--node-id", "${node.unique.id}"]
    assert task["Config"]["args"][-2:] == ["--ttl", "20"]
    assert task["Env"]["CONSUL_HTTP_ADDR"] == "http://10.0.0.1:8500"
    # nomadVar blocks the task until its variable exists (Nomad docs, template.mdx): the
    # reporter must start without the token variable, so it asks nomadVarExists first.
    tmpl = task["Templates"][0]["EmbeddedTmpl"]
    assert tmpl.index('nomadVarExists "nomad/jobs/llm-gpu-reporter"') < tmpl.index("nomadVar ")
