"""`llm-scheduler gateway`: the OpenAI-compatible entry point that routes requests to the
models' replicas, counts their demand in Consul and holds requests for models at zero.

Configured from the environment: CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and
LLM_SCHEDULER_GATEWAY_* (scheduler/gateway/config.py); the options below win.
"""

from __future__ import annotations

from typing import Any

import typer


def register(app: typer.Typer) -> None:
    @app.command("gateway")
    def gateway_cmd(
        host: str = typer.Option(None, "--host", help="address to listen on (default 127.0.0.1)"),
        port: int = typer.Option(None, "--port", help="port to listen on (default 8080)"),
        consul: str = typer.Option(None, "--consul", help="Consul's address (CONSUL_HTTP_ADDR)"),
        prefix: str = typer.Option(None, "--prefix", help="the scheduler's KV prefix"),
        json_logs: bool = typer.Option(False, "--json", help="one JSON log line per event"),
    ) -> None:
        """Serve the OpenAI API in front of the scheduler's models (SIGTERM drains)."""
        from pydantic import ValidationError

        from scheduler.gateway.config import GatewayConfig
        from scheduler.gateway.server import serve
        from scheduler.service.logs import configure_logging

        given: dict[str, Any] = {"host": host, "port": port, "consul_addr": consul,
                                 "kv_prefix": prefix}  # fmt: skip
        if json_logs:
            given["log_format"] = "json"
        try:
            config = GatewayConfig(**{k: v for k, v in given.items() if v is not None})
        except ValidationError as err:
            typer.echo(f"error: gateway settings: {err}", err=True)
            raise typer.Exit(2) from None
        configure_logging(config.log_format)
        serve(config)
