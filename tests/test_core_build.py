"""The compiled decision core (setup.py, mypyc) runs only whole and current, the pure one stays
the reference, and both give the same plans."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler
from scheduler import core_build
from scheduler.core_build import COMPILED, MANIFEST, PURE_ENV, choose, source_hash

REPO = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _fake_build(tmp_path: Path, modules: tuple[str, ...] = COMPILED) -> Path:
    """A core directory as an install leaves it: sources, extensions and the manifest."""
    core = tmp_path / "core"
    core.mkdir()
    for m in COMPILED:
        (core / f"{m}.py").write_text(f"NAME = {m!r}\n")
    for m in modules:
        (core / f"{m}{SUFFIX}").write_bytes(b"\x7fELF")
    manifest = {m: source_hash(core / f"{m}.py") for m in modules}
    (core / MANIFEST).write_text(json.dumps(manifest))
    return core


def test_a_whole_current_build_is_chosen(tmp_path: Path) -> None:
    assert choose(_fake_build(tmp_path), pure=False)[0] == "mypyc"


def test_asking_for_the_pure_core_wins(tmp_path: Path) -> None:
    build, why = choose(_fake_build(tmp_path), pure=True)
    assert (build, why) == ("pure", f"{PURE_ENV} is set")
    assert core_build.pure_requested({PURE_ENV: "1"})
    assert not core_build.pure_requested({PURE_ENV: "0"})


def test_no_manifest_means_not_compiled(tmp_path: Path) -> None:
    core = _fake_build(tmp_path)
    (core / MANIFEST).unlink()
    build, why = choose(core, pure=False)
    assert build == "pure" and "not compiled" in why


def test_a_source_edited_after_the_build_runs_every_module_pure(tmp_path: Path) -> None:
    core = _fake_build(tmp_path)
    (core / "victims.py").write_text("NAME = 'edited'\n")
    build, why = choose(core, pure=False)
    assert build == "pure"
    assert why == "scheduler/core/victims.py changed since it was compiled (reinstall)"


def test_a_module_the_build_left_out_runs_every_module_pure(tmp_path: Path) -> None:
    core = _fake_build(tmp_path, modules=COMPILED[1:])
    build, why = choose(core, pure=False)
    assert (build, why) == ("pure", f"scheduler.core.{COMPILED[0]} was not compiled")


def test_an_unreadable_manifest_runs_the_pure_core(tmp_path: Path) -> None:
    core = _fake_build(tmp_path)
    (core / MANIFEST).write_text("{not json")
    assert choose(core, pure=False)[0] == "pure"


def _run(args: list[str], pure: bool, timeout: int = 300) -> str:
    """Runs python with `args` in the checkout, on the pure core or the installed one; the
    last line it printed."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    if pure:
        env[PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout.strip().splitlines()[-1]


WHICH = "import scheduler, scheduler.core.decide as d; print(scheduler.CORE_BUILD, d.__file__)"


def test_the_pure_core_is_imported_when_asked_even_beside_extensions() -> None:
    build, path = _run(["-c", WHICH], pure=True).split(" ", 1)
    assert build == "pure"
    assert path.endswith("decide.py")


# Every plan of generated scenarios and of the bench's snapshots, digested.
PLANS = r"""
import hashlib, sys
sys.path.insert(0, "tests/core")
from hypothesis import HealthCheck, Phase, given, seed, settings
import scenario_gen as G, scenario_runs as T
from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.simulate import apply_plan
import scheduler
h = hashlib.sha256()
@seed(20261203)
@settings(max_examples=300, database=None, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(G.scenarios())
def run(scn):
    for _, plan in T.passes(scn):
        h.update(plan.model_dump_json().encode())
run()
snap = steady_snapshot(200, seed=1)
for _ in range(3):
    plan = decide(snap)
    h.update(plan.model_dump_json().encode())
    snap = apply_plan(snap, plan)
print(scheduler.CORE_BUILD, h.hexdigest())
"""


@pytest.mark.timeout(900)
def test_the_pure_core_passes_the_core_tests_too() -> None:
    """The suite runs the build the install made; the core's own tests also run on the other
    one (when it is compiled here), so a rule that holds in one holds in both."""
    if scheduler.CORE_BUILD != "mypyc":
        pytest.skip(f"the suite already runs the pure core here: {scheduler.CORE_BUILD_WHY}")
    _run(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/core"], True, 900)


@pytest.mark.timeout(600)
def test_the_compiled_and_the_pure_core_make_the_same_plans() -> None:
    if scheduler.CORE_BUILD != "mypyc":
        pytest.skip(f"the compiled core is not installed here: {scheduler.CORE_BUILD_WHY}")
    compiled = _run(["-c", PLANS], pure=False).split()
    pure = _run(["-c", PLANS], pure=True).split()
    assert compiled[0] == "mypyc" and pure[0] == "pure"
    assert compiled[1] == pure[1]
