"""`llm-scheduler plan --snapshot FILE`: replay one decision pass offline."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        snapshot: str = typer.Option(..., "--snapshot", help="snapshot JSON file, or - for stdin"),
    ) -> None:
        """Print the plan the decision core makes for a snapshot."""
        raise typer.Exit(code=1)
