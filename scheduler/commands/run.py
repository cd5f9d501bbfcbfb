"""`llm-scheduler run`: the long-running scheduler service (watch, decide, act as leader).

Configured from the environment: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION,
CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and LLM_SCHEDULER_* (see scheduler/service/config.py).
"""

from __future__ import annotations

import signal
from types import FrameType

import typer


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        log_format: str = typer.Option(None, "--log-format", help="console or json"),
        once: bool = typer.Option(
            False, "--once", help="one pass, then exit (acts only as leader)"
        ),
    ) -> None:
        """Run the scheduler service."""
        from scheduler.service.config import ServiceConfig
        from scheduler.service.logs import configure_logging
        from scheduler.service.loop import Service

        config = ServiceConfig()
        if log_format:
            config = config.model_copy(update={"log_format": log_format})
        configure_logging(config.log_format)
        if once:
            # Inline actuation: the command ends when its Nomad calls are done.
            config = config.model_copy(update={"actuation_workers": 0})
            plan = Service(config).run_pass()
            raise typer.Exit(code=0 if plan is not None else 1)

        from scheduler.ops.wiring import start_ops

        # /metrics, /healthz and the dashboard, plus OTLP traces when configured.
        ops = start_ops(config.listen_addr)
        service = Service(config, observers=ops.observers)

        def _stop(signum: int, frame: FrameType | None) -> None:
            service.stop()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        try:
            service.run()
        finally:
            ops.stop()
