"""Which build of the decision core runs: the modules setup.py compiled with mypyc, or the
pure-Python modules they were compiled from (the reference; both give the same plans, a test
compares them).

The compiled build runs only when it is whole and current: the build's manifest names every
module of COMPILED with the SHA-256 of the source it was compiled from, and every source still
has that hash. Otherwise (no compiler at install time, a source edited since: an editable
checkout keeps the extension files beside the sources) the pure modules run, never a mix: a
compiled module calls the others' compiled code directly, whatever was imported. Setting
LLM_SCHEDULER_PURE_PYTHON=1 asks for the pure modules at install and at run time.

This runs when `scheduler` is imported, before anything imports the core; it reads files and
the environment, so it lives here and not in the core.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

# Compiled by setup.py, which loads this file on its own (keep it standard library only).
# Hot modules of the pass; models (pydantic), plugins (the third-party contract, protocols)
# and the rest stay interpreted. Add a module here only with its tests passing on both builds.
COMPILED = (
    "builtin_rules",
    "chain",
    "decide",
    "defragment",
    "explain",
    "facts",
    "fair_reclaim",
    "fairshare",
    "growth",
    "guarantees",
    "held_back",
    "inventory",
    "lifecycle",
    "locality",
    "mig_advice",
    "node_devices",
    "node_index",
    "pass_state",
    "placement",
    "preemption",
    "reasons",
    "replacement",
    "reservations",
    "retirement",
    "scaling",
    "sharing",
    "sorted_groups",
    "turn_order",
    "verdicts",
    "victims",
    "warmth",
)
MANIFEST = "_compiled.json"  # beside the core's modules: {module: source sha256}
PURE_ENV = "LLM_SCHEDULER_PURE_PYTHON"
CORE_DIR = Path(__file__).resolve().parent / "core"


def pure_requested(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(PURE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled_file(core_dir: Path, module: str) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = core_dir / (module + suffix)
        if candidate.is_file():
            return candidate
    return None


def choose(core_dir: Path = CORE_DIR, pure: bool | None = None) -> tuple[str, str]:
    """("mypyc" or "pure", why)."""
    if pure if pure is not None else pure_requested():
        return "pure", f"{PURE_ENV} is set"
    manifest_path = core_dir / MANIFEST
    if not manifest_path.is_file():
        return "pure", "not compiled at install (no C compiler, mypy failed, or asked not to)"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        return "pure", f"{manifest_path.name} unreadable: {exc}"
    for module in COMPILED:
        if _compiled_file(core_dir, module) is None:
            return "pure", f"scheduler.core.{module} was not compiled"
        source = core_dir / f"{module}.py"
        if not isinstance(manifest, dict) or manifest.get(module) != source_hash(source):
            return "pure", f"scheduler/core/{module}.py changed since it was compiled (reinstall)"
    return "mypyc", "every compiled module matches its source"


class _PreferSource(importlib.abc.MetaPathFinder):
    """Loads the listed core modules from their .py files, not the extension beside them."""

    def __init__(self, core_dir: Path, modules: Sequence[str]) -> None:
        self.paths = {f"scheduler.core.{m}": core_dir / f"{m}.py" for m in modules}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.paths.get(fullname)
        if source is None or not source.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def install(core_dir: Path = CORE_DIR) -> tuple[str, str]:
    """Choose the build and, for the pure one, keep any extension files from being imported."""
    build, why = choose(core_dir)
    if build == "pure" and not any(isinstance(f, _PreferSource) for f in sys.meta_path):
        present = [m for m in COMPILED if _compiled_file(core_dir, m) is not None]
        if present:
            sys.meta_path.insert(0, _PreferSource(core_dir, present))
    return build, why
