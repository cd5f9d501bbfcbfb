"""Compiles the decision core's hot modules with mypyc (scheduler/core_build.py lists them).

Everything else about the package is in pyproject.toml. The compiled modules are an
optimisation only: without a C compiler or mypyc, or with LLM_SCHEDULER_PURE_PYTHON=1, the
install has the pure-Python core, which gives the same plans. Next to the extensions the build
writes a manifest of the sources' hashes; at import, scheduler/core_build.py runs the compiled
core only if every source still matches it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
CORE = Path("scheduler") / "core"


def _core_build() -> ModuleType:
    """scheduler/core_build.py (standard library only) on its own, not the package: its list
    of modules, its switch and its hashes are the ones the import-time check uses."""
    spec = importlib.util.spec_from_file_location("_core_build", HERE / "scheduler/core_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


core_build = _core_build()


def _pure_core(why: str) -> None:
    print(f"llm-scheduler: {why}; the pure-Python core will run", file=sys.stderr)


class BuildCore(build_ext):
    """Builds the extensions, each optional (a failure leaves the pure module), then writes the
    manifest beside them only if all of them were built."""

    def run(self) -> None:
        for ext in self.extensions:
            ext.optional = True
        super().run()
        modules = core_build.COMPILED
        built = [Path(self.get_ext_fullpath(f"scheduler.core.{m}")) for m in modules]
        if not built or not all(p.is_file() for p in built):
            _pure_core("the core was not compiled")
            return
        manifest = {m: core_build.source_hash(HERE / CORE / f"{m}.py") for m in modules}
        target = built[0].parent / core_build.MANIFEST
        target.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def ext_modules() -> list[Any]:
    if core_build.pure_requested():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:  # mypy not in the build environment: the pure core
        return []
    paths = [str(CORE / f"{m}.py") for m in core_build.COMPILED]
    try:
        return list(mypycify(paths, opt_level="3", group_name="scheduler_core"))
    except (Exception, SystemExit) as exc:  # e.g. a newer mypy's new complaint: install pure
        _pure_core(f"mypyc failed ({exc!r})")
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildCore})
