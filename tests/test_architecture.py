"""The decision core stays pure: it imports nothing that does I/O or talks to a cluster."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "scheduler" / "core"

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
