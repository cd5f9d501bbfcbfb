"""`llm-scheduler demo`: the real scheduler on embedded Consul and Nomad stand-ins, with a GPU
fleet, ten models, two tenants and a demand trace that peaks past capacity."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        duration: float = typer.Option(
            120.0, "--duration", min=5, help="seconds; it ends by itself"
        ),
        speed: float = typer.Option(
            1.0,
            "--speed",
            min=0.1,
            max=20,
            help="run the cluster's clocks (start-up, lifetimes, holds, pass interval) faster",
        ),
        port: int = typer.Option(
            9464, "--port", help="dashboard port on 127.0.0.1 (taken: any free one; 0: any)"
        ),
        no_dashboard: bool = typer.Option(False, "--no-dashboard", help="serve no web dashboard"),
        plain: bool = typer.Option(False, "--plain", help="periodic plain lines, not a live view"),
        every: float = typer.Option(10.0, "--every", min=0.5, help="seconds between plain lines"),
        log_file: Path | None = typer.Option(
            None, "--log-file", help="where the service logs go (default: a new file per run)"
        ),
    ) -> None:
        """Run the scheduler against embedded stand-ins and show what it does, live."""
        from rich.console import Console

        from scheduler.commands._standins import standins_missing
        from scheduler.ops.cli_support import esc

        try:
            from scheduler.demo.runner import DemoOptions, run_demo, summary_lines
        except ModuleNotFoundError as exc:
            raise standins_missing("demo", exc) from None

        console = Console()
        opts = DemoOptions(
            duration_s=duration, speed=speed, dashboard_port=None if no_dashboard else port,
            live=False if plain else None, plain_every_s=every, log_file=log_file,
        )  # fmt: skip
        try:
            result = run_demo(opts, console)
        except OSError as exc:
            console.print(f"[bold red]error:[/] cannot start the demo: {esc(exc)}", highlight=False)
            raise typer.Exit(1) from exc
        for line in summary_lines(result):
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        if result.stats.passes == 0:
            console.print(
                "[bold red]error:[/] the scheduler made no pass; see the service log above"
            )
            raise typer.Exit(1)
