"""Runtime templates come from the package (or the operator's folder, which wins), and the
stand-in's /v1/jobs/parse keeps what the templates use, as Nomad's parser does."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_scheduler_standins.nomad.hcl import parse_job
from scheduler.adapters.job_maker import TemplateError, template_text


@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
def test_shipped_templates_are_package_data(runtime: str) -> None:
    origin, text = template_text(runtime)
    assert origin == f"scheduler/data/jobspecs/{runtime}.nomad.hcl"
    assert 'job "llm"' in text and "/bin/sh" not in text


def test_the_operators_folder_wins_and_a_missing_template_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "vllm.nomad.hcl").write_text("# mine\n")
    assert template_text("vllm", str(tmp_path)) == (str(tmp_path / "vllm.nomad.hcl"), "# mine\n")
    assert template_text("sglang", str(tmp_path))[0].startswith("scheduler/data/")
    with pytest.raises(TemplateError, match="no jobspec template for runtime 'trtllm'"):
        template_text("trtllm", str(tmp_path))


def test_check_restart_is_kept_and_applies_to_the_services_checks() -> None:
    # nomad-notes.md section 7: /v1/jobs/parse returns CheckRestart {Limit, Grace (ns),
    # IgnoreWarnings}; canonicalisation merges a service-level block onto each of its checks
    # (api/services.go Service.Canonicalize).
    hcl = """
job "j" {
  group "g" {
    task "t" {
      driver = "docker"
      service {
        name = "s"
        check {
          type     = "http"
          path     = "/health"
          interval = "10s"
          timeout  = "2s"
        }
        check_restart {
          limit = 3
          grace = "40m"
        }
      }
    }
  }
}
"""
    raw = parse_job(hcl)
    service = raw["TaskGroups"][0]["Tasks"][0]["Services"][0]
    assert service["CheckRestart"] == {
        "Limit": 3,
        "Grace": 40 * 60 * 10**9,
        "IgnoreWarnings": False,
    }
    assert service["Checks"][0]["CheckRestart"] is None
    done = parse_job(hcl, canonicalize=True)
    check = done["TaskGroups"][0]["Tasks"][0]["Services"][0]["Checks"][0]
    assert check["CheckRestart"]["Grace"] == 40 * 60 * 10**9
