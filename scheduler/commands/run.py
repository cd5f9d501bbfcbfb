"""`llm-scheduler run`: the long-running scheduler service (watch, decide, act as leader).

Configured from the environment: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION,
CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and LLM_SCHEDULER_* (see scheduler/service/config.py).
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from scheduler.service.config import ServiceConfig


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        log_format: str = typer.Option(None, "--log-format", help="console or json"),
        once: bool = typer.Option(
            False, "--once", help="take the leader lock, do one pass, release it, exit"
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
            raise typer.Exit(_run_once(config))

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


def _run_once(config: ServiceConfig) -> int:
    """One pass as the leader: take the lock (or say who has it), decide, act, record, release.
    The lock is taken with no lock-delay, so the service can take it over at once afterwards."""
    from scheduler.service.loop import Service

    # Inline actuation (no workers): the lock is released only once its Nomad calls are done.
    service = Service(config.model_copy(update={"lock_delay_s": 0, "actuation_workers": 0}))
    try:
        leader = service.leader.acquire_once()
        if not leader:
            typer.echo(
                f"could not take the leader lock {service.layout.leader} in Consul "
                f"({config.consul_addr}): another scheduler holds it, or a lock-delay from one "
                "that just stopped is still running, or the token may not write the key or "
                "create a session. Nothing was changed; `llm-scheduler dry-run` shows what a "
                "pass would do.",
                err=True,
            )
            return 1
        plan = service.run_pass()
    finally:
        service.stop()
    if plan is None:
        typer.echo(f"the pass could not read the cluster: {service.last_read_error}", err=True)
        return 1
    starts = sum(1 for a in plan.actions if a.op == "start")
    stops = len(plan.actions) - starts
    pending = sorted(n for n, s in plan.models.items() if s.pending)
    typer.echo(
        f"one pass as leader: {starts} start(s), {stops} stop(s) sent to Nomad; "
        f"{len(plan.models)} model(s), {len(pending)} pending"
        + (f" ({', '.join(pending)})" if pending else "")
        + f"; status written under {service.layout.status}"
    )
    failed = service.actuator.errors
    return 1 if failed else 0
