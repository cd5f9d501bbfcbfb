"""`llm-scheduler snapshot`: the live cluster as a snapshot, for `plan --snapshot`."""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot_cmd(
        output: str = typer.Option("-", "--output", "-o", help="file to write, or - for stdout"),
    ) -> None:
        """Print the snapshot the scheduler would decide on now."""
        from datetime import UTC, datetime

        from scheduler.adapters.consul_kv import make_consul
        from scheduler.adapters.kv_layout import KVLayout
        from scheduler.adapters.nomad_api import NomadAPI
        from scheduler.adapters.snapshot_builder import ReadFailed, SnapshotBuilder
        from scheduler.core.models import to_json
        from scheduler.plugins import demand_source, signal_source
        from scheduler.service.config import ConfigError, load_config

        try:
            config = load_config()
        except ConfigError as exc:
            for line in exc.lines:
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(code=2) from None
        host, port, scheme = config.consul_parts()
        nomad = NomadAPI(
            config.nomad_base(),
            token=config.nomad_token,
            namespace=config.nomad_namespace,
            region=config.nomad_region,
        )
        builder = SnapshotBuilder(
            nomad,
            make_consul(host, port, scheme, config.consul_token),
            KVLayout(config.kv_prefix),
            demand_source=demand_source(config),
            signal_source=signal_source(config),  # one read: no latency window yet
            max_value_bytes=config.max_value_bytes,
        )
        try:
            view = builder.build(datetime.now(UTC))
        except ReadFailed as exc:
            typer.echo(f"cannot read the cluster: {exc}", err=True)
            raise typer.Exit(code=2) from exc
        for line in view.input_errors + view.warnings:
            typer.echo(line, err=True)
        text = to_json(view.snapshot) + "\n"
        if output == "-":
            sys.stdout.write(text)
        else:
            with open(output, "w") as fh:
                fh.write(text)
