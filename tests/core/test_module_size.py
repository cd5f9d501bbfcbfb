"""A core a newcomer can read: no module of the decision core (or of its tests) over 400
lines, no function of the core over 60."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "scheduler" / "core"
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60


def _modules() -> dict[str, str]:
    found = {p.name: p.read_text() for p in sorted(CORE.glob("*.py"))}
    assert len(found) > 10, "the core was not found"
    return found


def long_functions(source: str, limit: int = FUNCTION_LIMIT) -> dict[str, int]:
    """Functions and methods of `source` over `limit` lines (decorators and docstring
    included), by qualified name."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    assert child.end_lineno is not None
                    length = child.end_lineno - first + 1
                    if length > limit:
                        out[name] = length
                visit(child, name + ".")

    visit(ast.parse(source), "")
    return out


def test_no_core_module_is_over_400_lines() -> None:
    sizes = {name: len(text.splitlines()) for name, text in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > MODULE_LIMIT} == {}


def test_no_test_module_of_the_core_is_over_400_lines() -> None:
    tests = Path(__file__).resolve().parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted(tests.glob("*.py"))}
    assert {name: n for name, n in sizes.items() if n > MODULE_LIMIT} == {}


def test_no_core_function_is_over_60_lines() -> None:
    long = {
        f"{module}:{name}": n
        for module, text in _modules().items()
        for name, n in long_functions(text).items()
    }
    assert long == {}


def test_a_long_function_is_found() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LIMIT))
    source = f"class C:\n    def short(self) -> None:\n        pass\n\n    def f(self):\n{body}\n"
    source = source.replace("\n    x", "\n        x")
    assert long_functions(source) == {"C.f": FUNCTION_LIMIT + 1}
