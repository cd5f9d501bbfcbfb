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


@app.callback()
def _root() -> None:
    """Schedule LLM replicas onto the GPUs of a Nomad + Consul cluster."""


for register in REGISTRARS:
    register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
