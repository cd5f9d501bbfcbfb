"""A wheel install (not editable, as the scheduler's image does it) finds its templates and flag
lists inside the package and renders a job. No network: the wheel is built without build
isolation and installed with --no-deps; the dependencies come from this venv's site-packages
through a .pth line (a path added that way has its own .pth files ignored, so the editable
install's finder of the source tree stays off), and the source tree is not on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import copy, json, sys
from datetime import UTC, datetime
import scheduler
from scheduler.adapters.nomad_jobs import build_job, template_variables
from scheduler.core.models import GPU, Model, Node, Shard, StartAction
from scheduler.adapters.job_maker import template_text
from scheduler.serving.flags import known_flags
from llm_scheduler_standins.nomad.hcl import parse_job

out = {"package": scheduler.__file__, "path": sys.path, "flags": len(known_flags("vllm"))}
node = Node(id="n1", name="a", address="10.0.0.1", cpu_cores=64, memory_gb=512,
            gpus=[GPU(id=f"G{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80) for i in range(4)])
for runtime in ("vllm", "sglang"):
    model = Model.model_validate({"name": "m", "owner": "o",
        "profiles": [{"name": "tp4", "gpus": 4}],
        "serve": {"source": "org/model", "runtime": runtime}})
    origin, text = template_text(runtime)
    template = parse_job(text, variables=template_variables(model, "img"), canonicalize=True)
    action = StartAction(model="m", profile="tp4", replica="r-1", reason="",
                         shards=[Shard(node="n1", gpus=["G0", "G1", "G2", "G3"])])
    job = build_job(template, model, action, {"n1": node}, datetime.now(UTC))
    out[runtime] = {"origin": origin, "args": job["TaskGroups"][0]["Tasks"][0]["Config"]["args"]}
print(json.dumps(out))
"""


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_wheel_install_renders_jobs_from_its_package_data(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(dist), str(REPO)],
        tmp_path,
        # The pure-Python core: compiling it (a minute) is not what this test is about.
        {**os.environ, "LLM_SCHEDULER_PURE_PYTHON": "1"},
    )  # fmt: skip
    if built.returncode and "bdist_wheel" in built.stderr + built.stdout:
        pytest.skip("this venv's setuptools cannot build wheels offline (dev extra: >=70.1)")
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("llm_scheduler-*.whl")
    # One distribution, two packages; the stand-ins' own dependency only under their extra.
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    assert {n.split("/")[0] for n in names if n.endswith(".py")} == {
        "scheduler",
        "llm_scheduler_standins",
    }
    hcl2 = [r for r in requires if r.startswith("python-hcl2")]
    assert hcl2 and all(r.endswith('extra == "standins"') for r in hcl2), requires
    assert 'llm-scheduler[standins]; extra == "dev"' in requires, requires

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
             tmp_path).stdout.strip()
    )  # fmt: skip
    (site / "dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    ran = _run([str(python), "-I", "-c", SCRIPT], tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert Path(out["package"]).is_relative_to(site), out["package"]
    assert not any(Path(p) == REPO or Path(p) == REPO / "scheduler" for p in out["path"])
    assert out["flags"] > 400
    assert out["vllm"]["origin"] == "scheduler/data/jobspecs/vllm.nomad.hcl"
    assert out["vllm"]["args"][0] == "org/model"
    assert out["sglang"]["args"][:4] == ["-m", "sglang.launch_server", "--model-path", "org/model"]
