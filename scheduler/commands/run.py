"""`llm-scheduler run`: the long-running scheduler service (watch, decide, act as leader).

Configured from the environment: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION,
CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and LLM_SCHEDULER_* (see scheduler/service/config.py).
"""

from __future__ import annotations

import signal
from enum import StrEnum
from types import FrameType
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from scheduler.service.config import ServiceConfig


class LogFormat(StrEnum):
    console = "console"
    json = "json"


def _fail(message: str, code: int) -> typer.Exit:
    for line in message.splitlines():
        typer.echo(f"error: {line}", err=True)
    return typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        log_format: LogFormat | None = typer.Option(
            None, "--log-format", help="default: LLM_SCHEDULER_LOG_FORMAT, else console"
        ),
        once: bool = typer.Option(
            False, "--once", help="take the leader lock, do one pass, release it, exit"
        ),
    ) -> None:
        """Run the scheduler service. A bad setting exits 2, a port that is taken exits 1."""
        from scheduler.service.config import ConfigError, load_config
        from scheduler.service.logs import configure_logging

        try:
            config = load_config(**({"log_format": log_format.value} if log_format else {}))
        except ConfigError as exc:
            raise _fail(str(exc), 2) from None
        configure_logging(config.log_format)
        if once:
            raise typer.Exit(_run_once(config))
        _serve(config)


def _serve(config: ServiceConfig) -> None:
    import structlog

    from scheduler.ops.wiring import start_ops
    from scheduler.service.loop import Service

    # /metrics, /healthz and the dashboard, plus OTLP traces when configured.
    try:
        ops = start_ops(config.listen_addr)
    except OSError as exc:
        raise _fail(str(exc), 1) from None
    if ops.server is not None:
        structlog.get_logger("llm-scheduler.service").info(
            "listening", dashboard=ops.server.url + "/", metrics=ops.server.url + "/metrics"
        )
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
