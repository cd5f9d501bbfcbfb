"""The decision core stays pure: it imports nothing that does I/O or talks to a cluster. The
product and the stand-ins stay apart: no `scheduler` module imports the
stand-ins but the demo's, and the stand-ins import nothing from `scheduler`."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORE = REPO / "scheduler" / "core"
STANDINS = "llm_scheduler_standins"

FORBIDDEN_ROOTS = {
    "consul",
    "nomad",
    "httpx",
    "requests",
    "pynvml",
    "socket",
    "subprocess",
    "threading",
    "asyncio",
    "time",
    "random",
    "uvicorn",
    "starlette",
    "prometheus_client",
    "opentelemetry",
    "structlog",
    "logging",
    "os",
    "rich",
    "typer",
    "yaml",
}
# Inside the package, the core may only import itself.
ALLOWED_SCHEDULER_PREFIX = "scheduler.core"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.append("scheduler.core." + (node.module or ""))
            elif node.module:
                names.append(node.module)
    return names


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    assert CORE_FILES, "no core modules found"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_imports_no_adapter(path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        assert root not in FORBIDDEN_ROOTS, f"{path.name} imports {name}"
        if root == "scheduler":
            assert name.startswith(ALLOWED_SCHEDULER_PREFIX), f"{path.name} imports {name}"


def test_checker_catches_a_bad_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import consul\nfrom scheduler.adapters import x\n")
    assert _imports(bad) == ["consul", "scheduler.adapters"]


# ------------------------------------------------------------------ product <-> stand-ins


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_with_scope(path: Path) -> list[tuple[str, bool]]:
    """(absolute module name, imported inside a function) for every import in the file;
    relative imports are resolved against the file's own package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((alias.name, lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = package[: len(package) - child.level + 1] if child.level else []
                found.append((".".join([*base, *filter(None, [child.module])]), lazy))
            visit(child, inner)

    visit(tree, False)
    return found


def _names_standins(path: Path) -> bool:
    """A string naming the stand-ins' package: an `importlib.import_module` the AST misses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and STANDINS in n.value
        for n in ast.walk(tree)
    )


PRODUCT_FILES = sorted((REPO / "scheduler").rglob("*.py"))
STANDIN_FILES = sorted((REPO / STANDINS).rglob("*.py"))
# The demo's runner drives the stand-ins; it is imported only by the demo command, lazily.
LOADS_STANDINS = {"scheduler.demo.runner"}
# The commands that need the stand-ins import them (or the runner) inside the command only.
LAZY_IMPORTERS = {"scheduler.commands.demo", "scheduler.commands.devcluster"}


def _product_violations(path: Path) -> list[str]:
    module, bad = _module(path), []
    for name, lazy in _imports_with_scope(path):
        root = name.split(".")[0]
        if root not in (STANDINS, "hcl2") and name not in LOADS_STANDINS:
            continue
        if module in LOADS_STANDINS or (module in LAZY_IMPORTERS and lazy):
            continue
        bad.append(f"{module} imports {name}" + (" (inside a function)" if lazy else ""))
    if module not in LOADS_STANDINS | LAZY_IMPORTERS and _names_standins(path):
        bad.append(f"{module} names {STANDINS} in a string")
    return bad


def _standin_violations(path: Path) -> list[str]:
    return [
        f"{_module(path)} imports {name}"
        for name, _ in _imports_with_scope(path)
        if name.split(".")[0] == "scheduler"
    ]


def test_both_sides_have_modules() -> None:
    assert len(PRODUCT_FILES) > 50 and len(STANDIN_FILES) > 20
    modules = {_module(p) for p in PRODUCT_FILES}
    assert modules >= LOADS_STANDINS | LAZY_IMPORTERS, "an exception names a module that is gone"


@pytest.mark.parametrize("path", PRODUCT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_product_does_not_import_the_stand_ins(path: Path) -> None:
    assert _product_violations(path) == []


@pytest.mark.parametrize("path", STANDIN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_stand_ins_do_not_import_the_product(path: Path) -> None:
    assert _standin_violations(path) == []


def test_the_separation_checker_catches_violations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    files = {
        "scheduler/service/bad.py": "from llm_scheduler_standins.runner import serve_in_thread\n",
        "scheduler/ops/sneaky.py": "def f():\n    import hcl2\n",
        "scheduler/ops/dynamic.py": "import importlib\n"
        "importlib.import_module('llm_scheduler_standins')\n",
        "scheduler/ops/via_demo.py": "from scheduler.demo.runner import run_demo\n",
        "scheduler/commands/devcluster.py": "from llm_scheduler_standins.fleet import load_fleet\n",
        "scheduler/commands/demo.py": "def cmd():\n"
        "    from scheduler.demo.runner import run_demo\n",
        "scheduler/demo/runner.py": "from llm_scheduler_standins.devcluster import DevCluster\n",
        "llm_scheduler_standins/nomad/bad.py": "from scheduler.core.models import Node\n",
        "llm_scheduler_standins/nomad/rel.py": "from ..fleet_model import Node\n"
        "from . import views\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = {rel: _product_violations(tmp_path / rel) for rel in files if rel.startswith("sch")}
    assert found == {
        "scheduler/service/bad.py": ["scheduler.service.bad imports llm_scheduler_standins.runner"],
        "scheduler/ops/sneaky.py": ["scheduler.ops.sneaky imports hcl2 (inside a function)"],
        "scheduler/ops/dynamic.py": [
            "scheduler.ops.dynamic names llm_scheduler_standins in a string"
        ],
        "scheduler/ops/via_demo.py": ["scheduler.ops.via_demo imports scheduler.demo.runner"],
        # At module level, the command would load the stand-ins with every `llm-scheduler` call.
        "scheduler/commands/devcluster.py": [
            "scheduler.commands.devcluster imports llm_scheduler_standins.fleet"
        ],
        "scheduler/commands/demo.py": [],
        "scheduler/demo/runner.py": [],
    }
    assert _standin_violations(tmp_path / "llm_scheduler_standins/nomad/bad.py") == [
        "llm_scheduler_standins.nomad.bad imports scheduler.core.models"
    ]
    assert _imports_with_scope(tmp_path / "llm_scheduler_standins/nomad/rel.py") == [
        ("llm_scheduler_standins.fleet_model", False),
        ("llm_scheduler_standins.nomad", False),
    ]
