"""CLI command modules. Each exposes `register(app)`; import cost stays low by importing
heavy modules inside the command functions."""

from __future__ import annotations

from collections.abc import Callable

import typer

from scheduler.commands import plan

REGISTRARS: list[Callable[[typer.Typer], None]] = [plan.register]
