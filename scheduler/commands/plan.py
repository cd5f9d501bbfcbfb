"""`llm-scheduler plan --snapshot FILE`: replay one decision pass offline."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        snapshot: str = typer.Option(..., "--snapshot", help="snapshot JSON file, or - for stdin"),
    ) -> None:
        """Print the plan the decision core makes for a snapshot."""
        import json
        import sys
        from pathlib import Path

        from scheduler.core.decide import decide
        from scheduler.core.models import to_json
        from scheduler.core.validate import SnapshotError, parse_snapshot, upgrade_snapshot

        try:
            text = sys.stdin.read() if snapshot == "-" else Path(snapshot).read_text()
        except OSError as err:
            typer.echo(f"snapshot: cannot read {snapshot}: {err.strerror}", err=True)
            raise typer.Exit(code=2) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            typer.echo(
                f"snapshot: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}",
                err=True,
            )
            raise typer.Exit(code=2) from None
        data, notes = upgrade_snapshot(data)
        for line in notes:
            typer.echo(line, err=True)
        try:
            snap = parse_snapshot(data)
        except SnapshotError as err:
            for line in err.problems:
                typer.echo(line, err=True)
            raise typer.Exit(code=2) from None
        typer.echo(to_json(decide(snap)))
