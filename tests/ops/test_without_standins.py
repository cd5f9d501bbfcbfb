"""The product without the `standins` extra: `pip install llm-scheduler` has
no python-hcl2, and the scheduler's image has no llm_scheduler_standins at all. The service and
every command but `demo` and `devcluster` never import them; those two say in one line which
extra to install.

Each check runs in a fresh interpreter whose import system refuses the stand-ins (and records
every attempt), the stand-ins themselves being served from this test process where needed."""

from __future__ import annotations

import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler

# Plays an install without the extra: a finder ahead of all others refuses the blocked modules
# as a missing distribution would, and writes down every attempt to import one.
PRELUDE = r"""
import atexit, json, os, sys
BLOCKED = set(os.environ["BLOCKED"].split(","))
tried = []

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
atexit.register(lambda: open(os.environ["TRIED"], "w").write(json.dumps(tried)))
"""
CLI = (
    PRELUDE
    + "from scheduler.cli import main\nsys.argv = ['llm-scheduler', *sys.argv[1:]]\nmain()\n"
)
EVERYTHING = ("llm_scheduler_standins", "hcl2")
INSTALL = "pip install 'llm-scheduler[standins]'"


def _python(
    tmp_path: Path, code: str, *args: str, blocked: tuple[str, ...] = EVERYTHING, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    tried = tmp_path / f"tried-{len(list(tmp_path.iterdir()))}.json"
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,  # not the checkout: nothing found by accident from the working directory
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **env, "BLOCKED": ",".join(blocked), "TRIED": str(tried)},
    )  # fmt: skip
    return done, json.loads(tried.read_text()) if tried.exists() else ["<no report>"]


@pytest.mark.parametrize(
    ("command", "blocked"),
    [("demo", ("hcl2",)), ("devcluster", ("hcl2",)), ("demo", EVERYTHING)],
    ids=["demo-no-hcl2", "devcluster-no-hcl2", "demo-no-standins-package"],
)
def test_demo_and_devcluster_name_the_extra_in_one_line(
    tmp_path: Path, command: str, blocked: tuple[str, ...]
) -> None:
    done, tried = _python(tmp_path, CLI, command, blocked=blocked)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"`llm-scheduler {command}`" in line and "`standins` extra" in line, line
    assert INSTALL in line and "is missing" in line, line
    assert tried, "the stand-ins were never asked for: the check proves nothing"


def test_every_scheduler_module_imports_without_the_stand_ins(tmp_path: Path) -> None:
    # The demo's runner is the one module that loads the stand-ins; `llm-scheduler demo`
    # imports it only when run (test above). Everything else, the service included, must load.
    code = PRELUDE + (
        "import importlib, pkgutil, scheduler\n"
        "failed = {}\n"
        "for info in pkgutil.walk_packages(scheduler.__path__, 'scheduler.'):\n"
        "    if info.name not in ('scheduler.demo.runner', 'scheduler.__main__'):\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except Exception as exc:\n"
        "            failed[info.name] = repr(exc)\n"
        "try:\n"
        "    importlib.import_module('scheduler.demo.runner')\n"
        "except ModuleNotFoundError as exc:\n"
        "    failed['scheduler.demo.runner'] = exc.name\n"
        "from scheduler.ops.wiring import start_ops\n"
        "ops = start_ops('127.0.0.1:0')  # the dashboard and /metrics server of `run`\n"
        "failed['served'] = ops.server is not None and ops.server.url\n"
        "ops.stop()\n"
        "print(json.dumps(failed))\n"
    )
    done, tried = _python(tmp_path, code)
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout)
    # The blocker works (the demo's runner cannot load), and nothing else asked for them.
    served = failed.pop("served")
    assert failed == {"scheduler.demo.runner": "llm_scheduler_standins"}, failed
    assert served and served.startswith("http://127.0.0.1:"), served
    assert tried == ["llm_scheduler_standins"], tried
    assert sum(1 for _ in pkgutil.walk_packages(scheduler.__path__, "scheduler.")) > 50


def test_plan_runs_offline_without_the_stand_ins(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    node = {
        "id": "n1",
        "name": "a",
        "cpu_cores": 8,
        "memory_gb": 64,
        "gpus": [{"id": "G0", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80}],
    }
    model = {"name": "m", "owner": "o", "scaling": {"min": 1, "max": 1},
             "profiles": [{"name": "one", "gpus": 1}]}  # fmt: skip
    snapshot.write_text(
        json.dumps({"now": "2026-12-03T10:00:00Z", "nodes": [node], "models": [model]})
    )
    done, tried = _python(tmp_path, CLI, "plan", "--snapshot", str(snapshot))
    assert done.returncode == 0, done.stderr[-2000:]
    (start,) = json.loads(done.stdout)["actions"]
    assert start["op"] == "start" and start["shards"][0]["gpus"] == ["G0"]
    assert tried == []


def test_the_service_does_a_pass_without_the_stand_ins(tmp_path: Path, cluster: object) -> None:
    """`run --once` against stand-ins served by this process: the scheduler's own process
    has neither the stand-ins nor python-hcl2 (Nomad parses the job template, not it)."""
    import nomad
    from scheduler.ops.connect import consul_client

    prefix = "no-standins/"
    kv = consul_client(cluster.consul_url).kv  # type: ignore[attr-defined]
    model = {"name": "bare", "owner": "org/a", "scaling": {"min": 1, "max": 1},
             "serve": {"source": "org/bare"}, "profiles": [{"name": "one", "gpus": 1}]}  # fmt: skip
    kv.put(prefix + "models/bare", json.dumps(model))
    done, tried = _python(
        tmp_path, CLI, "run", "--once",
        CONSUL_HTTP_ADDR=cluster.consul_url, NOMAD_ADDR=cluster.nomad_url,  # type: ignore[attr-defined]
        LLM_SCHEDULER_KV_PREFIX=prefix,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "one pass as leader: 1 start(s)" in done.stdout
    jobs = nomad.Nomad(address=cluster.nomad_url).jobs.get_jobs()  # type: ignore[attr-defined]
    assert any(j["ID"].startswith("llm-bare-") for j in jobs)
    assert tried == []


def test_the_readmes_demo_command_installs_the_extra() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"```sh\n(.*?)```", readme, re.S))
    (demo,) = [line for line in blocks.splitlines() if "llm-scheduler demo" in line]
    assert "pip install -e '.[standins]'" in demo, demo
