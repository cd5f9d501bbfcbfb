"""The `llm-scheduler` command line. Each area registers its commands from its own module."""

from __future__ import annotations

import typer

from scheduler.commands import REGISTRARS

app = typer.Typer(
    name="llm-scheduler",
    help="Schedule LLM replicas onto the GPUs of a Nomad + Consul cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"llm-scheduler {version('llm-scheduler')}")
        except PackageNotFoundError:  # a source tree that was never installed
            typer.echo("llm-scheduler (not installed: no package metadata)")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="print the version"
    ),
) -> None:
    """Schedule LLM replicas onto the GPUs of a Nomad + Consul cluster."""


for register in REGISTRARS:
    register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
