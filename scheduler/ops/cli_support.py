"""What every operator command shares: rich output, JSON output, spinners, one-sentence errors.

Everything that comes from a user or a server (names, keys, validation messages with their
regexes, error texts) goes through `esc` before rich renders it: rich reads `[...]` as markup
and would eat a pattern such as `^[a-z0-9]{0,62}$`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from scheduler.ops.connect import (
    OperatorError,
    consul_addr,
    is_connection_error,
    nomad_addr,
    unreachable,
)

T = TypeVar("T")

# Piped or redirected output gets lines this wide: a table keeps one row per line (grep, awk,
# a CI log) instead of wrapping one word per line at rich's default of 80 columns.
PIPE_WIDTH = 400


class CLIConsole(Console):
    """A Console that is as wide as the terminal, and wide enough for whole rows when piped.
    COLUMNS, when set, wins as it does for rich."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and "COLUMNS" not in os.environ:
            return ConsoleDimensions(PIPE_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = CLIConsole()
err_console = CLIConsole(stderr=True)


def fits(table: Any, out: Console | None = None) -> bool:
    """Whether `table` fits the console without cutting or splitting a no-wrap column (names,
    timestamps): rich would otherwise shorten them with an ellipsis to make the row fit."""
    from rich.measure import Measurement

    out = out or console
    needed = Measurement.get(out, out.options.update_width(100_000), table).minimum
    return needed <= out.size.width


def print_table_or_lines(table: Any, lines: Callable[[], Iterable[str]]) -> bool:
    """The table when it fits (True); else one line per row, whole (the terminal wraps a
    long one)."""
    if fits(table):
        console.print(table)
        return True
    for line in lines():
        console.print(line, highlight=False, soft_wrap=True)
    return False


def esc(value: object) -> str:
    """User- or server-supplied text, made safe to print inside rich markup."""
    return escape(str(value))


# The --json flag of the running command: set by `json_mode`, read by `fail`, so that a script
# that asked for JSON gets a JSON error object on stdout instead of nothing.
_json_errors = False


@contextmanager
def json_mode(enabled: bool) -> Iterator[None]:
    global _json_errors
    before, _json_errors = _json_errors, enabled
    try:
        yield
    finally:
        _json_errors = before


def fail(message: str, code: int = 1, details: list[str] | None = None) -> NoReturn:
    """`error: <message>` on stderr (and a JSON object on stdout under --json), then exit."""
    if _json_errors:
        print_json({"error": message, "details": details or [], "exit_code": code})
    text = message + "".join(f"\n  {line}" for line in details or [])
    err_console.print(f"[bold red]error:[/] {esc(text)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@contextmanager
def working(message: str, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while something slow runs (silent when stderr is not a terminal)."""
    if quiet or not err_console.is_terminal:
        yield
        return
    with err_console.status(esc(message), spinner="dots"):
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


def guarded(fn: Callable[[], None], as_json: bool = False) -> None:
    """Run a command body; an OperatorError becomes `error: <sentence>` and exit code 1 (and,
    under --json, `{"error": ...}` on stdout)."""
    with json_mode(as_json):
        try:
            fn()
        except OperatorError as exc:
            fail(str(exc))


def require_read(client: Any, prefix: str, policy: str = "consul/acl/operator.policy.hcl") -> None:
    """Turn an empty listing that an ACL caused into a permission error.

    Consul filters a recursive read by the token's key rules and answers 404 when nothing is
    left, exactly as for an empty prefix; a single-key read is checked before the lookup and
    refused with 403 even for a missing key (hashicorp/consul agent/consul/kvs_endpoint.go:
    KVS.Get calls KeyReadAllowed, KVS.List only filters). So an empty listing asks once more.
    """
    try:
        client.kv.get(prefix)
    except Exception as exc:
        if _is_acl(exc):
            raise OperatorError(
                f"Consul at {consul_addr()} refused to read {prefix} (permission denied): "
                f"set CONSUL_HTTP_TOKEN to a token that may read it (see {policy})"
            ) from exc
        if is_connection_error(exc):
            raise unreachable("Consul", consul_addr(), exc) from exc
        raise


def hidden_by_acl(prefix: str) -> bool:
    """Whether Consul left keys under `prefix` out of a listing because of the token's rules.

    Consul says so in `X-Consul-Results-Filtered-By-ACLs: true`, for a token other than the
    anonymous one (hashicorp/consul agent/consul/rpc.go: blockingQuery resets the flag for
    unauthenticated calls), which py-consul does not expose: ask once with a keys listing. Best
    effort: any failure here means "not known", never an error of its own.
    """
    import httpx

    headers = {}
    if token := os.environ.get("CONSUL_HTTP_TOKEN"):
        headers["X-Consul-Token"] = token
    try:
        answer = httpx.get(
            f"{consul_addr()}/v1/kv/{prefix}", params={"keys": ""}, headers=headers, timeout=5
        )
    except httpx.HTTPError:
        return False
    return answer.headers.get("X-Consul-Results-Filtered-By-ACLs", "").lower() == "true"
