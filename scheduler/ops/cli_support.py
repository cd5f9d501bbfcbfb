"""What every operator command shares: rich output, JSON output, spinners, one-sentence errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console

from scheduler.ops.connect import (
    OperatorError,
    consul_addr,
    is_connection_error,
    nomad_addr,
    unreachable,
)

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@contextmanager
def working(message: str, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while something slow runs (silent when stderr is not a terminal)."""
    if quiet or not err_console.is_terminal:
        yield
        return
    with err_console.status(message, spinner="dots"):
        yield


def call(service: str, fn: Callable[[], T], url: str | None = None) -> T:
    """Run one client call; turn an unreachable server or a refused token into a clear error."""
    target = url or (consul_addr() if service == "Consul" else nomad_addr())
    try:
        return fn()
    except OperatorError:
        raise
    except Exception as exc:
        if is_connection_error(exc) or _is_acl(exc):
            raise unreachable(service, target, exc) from exc
        raise


def _is_acl(exc: BaseException) -> bool:
    name = type(exc).__name__
    return "ACLPermissionDenied" in name or "URLNotAuthorized" in name


def guarded(fn: Callable[[], None]) -> None:
    """Run a command body; an OperatorError becomes `error: <sentence>` and exit code 1."""
    try:
        fn()
    except OperatorError as exc:
        fail(str(exc))
