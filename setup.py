"""Compiles the decision core's hot modules with mypyc (scheduler/core_build.py lists them).

Everything else about the package is in pyproject.toml. The compiled modules are an
optimisation only: without a C compiler or mypyc, or with LLM_SCHEDULER_PURE_PYTHON=1, the
install has the pure-Python core, which gives the same plans. Next to the extensions the build
writes a manifest of the sources' hashes; at import, scheduler/core_build.py runs the compiled
core only if every source still matches it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
CORE = Path("scheduler") / "core"
PURE_ENV = "LLM_SCHEDULER_PURE_PYTHON"


def compiled_modules() -> tuple[str, ...]:
    """COMPILED from scheduler/core_build.py, read without importing the package."""
    tree = ast.parse((HERE / "scheduler" / "core_build.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple)
            return tuple(str(v) for v in value)
    raise SystemExit("scheduler/core_build.py has no COMPILED tuple")


def _pure_core(why: str) -> None:
    print(f"llm-scheduler: {why}; the pure-Python core will run", file=sys.stderr)


def _pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


class BuildCore(build_ext):
    """Builds the extensions, each optional (a failure leaves the pure module), then writes the
    manifest beside them only if all of them were built."""

    def run(self) -> None:
        for ext in self.extensions:
            ext.optional = True
        super().run()
        modules = compiled_modules()
        built = [Path(self.get_ext_fullpath(f"scheduler.core.{m}")) for m in modules]
        if not built or not all(p.is_file() for p in built):
            _pure_core("the core was not compiled")
            return
        manifest = {
            m: hashlib.sha256((HERE / CORE / f"{m}.py").read_bytes()).hexdigest() for m in modules
        }
        target = built[0].parent / "_compiled.json"
        target.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def ext_modules() -> list[Any]:
    if _pure():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # mypy not in the build environment: the pure core
        return []
    paths = [str(CORE / f"{m}.py") for m in compiled_modules()]
    try:
        return list(mypycify(paths, opt_level="3", group_name="scheduler_core"))
    except (Exception, SystemExit) as exc:  # e.g. a newer mypy's new complaint: install pure
        _pure_core(f"mypyc failed ({exc!r})")
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildCore})
