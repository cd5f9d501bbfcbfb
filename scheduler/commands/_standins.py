"""`demo` and `devcluster` run on the embedded stand-ins, which ship as the `standins` extra.

The service and every other command work without it, so a missing extra is reported in one
line that names it, not as a traceback.
"""

from __future__ import annotations

import typer

INSTALL = "pip install 'llm-scheduler[standins]'"


def standins_missing(command: str, exc: ModuleNotFoundError) -> typer.Exit:
    """The exit for `command` when importing the stand-ins failed; a module of the product
    itself missing is a bug, not a missing extra, and is raised again."""
    if (exc.name or "").split(".")[0] == "scheduler":
        raise exc
    typer.echo(
        f"error: `llm-scheduler {command}` needs the Consul and Nomad stand-ins, which come"
        f" with the `standins` extra: {INSTALL} (module {exc.name!r} is missing)",
        err=True,
    )
    return typer.Exit(1)
