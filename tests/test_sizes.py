"""Code a newcomer can read: no module of `scheduler/` (the decision core included),
`llm_scheduler_standins/`, `bench/` or `tests/` over 400 lines, and no function or method there
over 60 (decorators and docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("scheduler", "llm_scheduler_standins", "bench")
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60


def _modules(trees: tuple[str, ...]) -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for tree in trees
        for path in sorted((ROOT / tree).rglob("*.py"))
    }


def long_functions(source: str, limit: int = FUNCTION_LIMIT) -> dict[str, int]:
    """Functions and methods of `source` (nested ones too) over `limit` lines, by qualified
    name."""
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


def test_every_tree_is_found() -> None:
    modules = _modules(CODE)
    assert sum(name.startswith("scheduler/core/") for name in modules) > 10
    assert len(modules) > 150
    assert len(_modules(("tests",))) > 100


def test_no_module_is_over_400_lines() -> None:
    over = {
        name: n
        for name, text in _modules((*CODE, "tests")).items()
        if (n := len(text.splitlines())) > MODULE_LIMIT
    }
    assert not over, over


def test_no_function_is_over_60_lines() -> None:
    over = {
        f"{name}:{function}": n
        for name, text in _modules((*CODE, "tests")).items()
        for function, n in long_functions(text).items()
    }
    assert not over, over


def test_the_measure_counts_decorators_and_nested_functions() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(58))
    source = f"@staticmethod\ndef outer():\n{body}    def inner():\n        pass\n"
    assert long_functions(source) == {"outer": 62}
    nested = "class C:\n    def m(self):\n" + "".join(f"        y{i} = {i}\n" for i in range(60))
    assert long_functions(nested) == {"C.m": 61}
    assert long_functions(nested, limit=61) == {}
