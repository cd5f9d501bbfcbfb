"""The Dockerfile builds the scheduler image from the package's wheel, and the scheduler's own
jobspec runs a command that image has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import hcl2
from typer.testing import CliRunner

from scheduler.cli import app

REPO = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        (m.group(1).upper(), m.group(2).strip())
        for m in re.finditer(r"^(\w+)\s+(.*)$", text, re.MULTILINE)
        if not m.group(0).startswith("#")
    ]


def test_the_image_installs_the_wheel_not_the_source_tree() -> None:
    steps = _instructions()
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    assert "pip wheel" in runs and "pip install --no-cache-dir /tmp/dist/*.whl" in runs
    assert " -e " not in runs and "--editable" not in runs
    for op, arg in steps:
        if op == "COPY" and "--from" not in arg:
            for src in arg.split()[:-1]:
                assert (REPO / src).exists(), src
    # setup.py compiles the decision core (mypyc); the build stage has a C compiler for it.
    copied = [arg for op, arg in steps if op == "COPY" and "--from" not in arg]
    assert any("setup.py" in arg.split()[:-1] for arg in copied), copied
    assert "gcc" in runs
    assert ("ENTRYPOINT", '["llm-scheduler"]') in steps
    assert json.loads(dict(steps)["CMD"]) == ["run"]


def test_the_scheduler_jobspec_runs_a_command_of_the_image() -> None:
    spec = hcl2.loads((REPO / "jobspecs/llm-scheduler.nomad.hcl").read_text())
    ((_, job),) = spec["job"][0].items()
    ((_, group),) = job["group"][0].items()
    ((_, task),) = group["task"][0].items()
    args = [a.strip('"') for a in task["config"][0]["args"]]
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
