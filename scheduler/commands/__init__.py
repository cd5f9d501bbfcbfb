"""CLI command modules. Every module in this package exposes `register(app)`; they are found
by name so that areas add commands without touching a shared list. Heavy imports belong
inside the command functions, to keep `llm-scheduler --help` fast."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import typer


def _registrars() -> list[Callable[[typer.Typer], None]]:
    found: list[Callable[[typer.Typer], None]] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(module.register)
    return found


REGISTRARS = _registrars()
