"""One call for `llm-scheduler run`: tracing, metrics, dashboard, and the server for them.

ops = start_ops(config.listen_addr)
service = Service(config, observers=ops.observers)
try:
    service.run()
finally:
    ops.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.ops.dashboard import DashboardObserver, parse_listen, serve_ops
from scheduler.ops.http_server import RunningServer
from scheduler.ops.metrics import MetricsObserver
from scheduler.ops.tracing import setup_tracing
from scheduler.service.observer import PassObserver


@dataclass
class Ops:
    dashboard: DashboardObserver
    metrics: MetricsObserver
    server: RunningServer | None
    observers: list[PassObserver] = field(default_factory=list)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def start_ops(listen_addr: str | None = "127.0.0.1:9464", otlp_endpoint: str | None = None) -> Ops:
    """Install tracing (only if an OTLP endpoint is set) and serve /, /api/state, /metrics and
    /healthz on listen_addr (None: observers only, no server)."""
    setup_tracing(otlp_endpoint)
    dashboard, metrics = DashboardObserver(), MetricsObserver()
    server = None
    if listen_addr:
        host, port = parse_listen(listen_addr)
        try:
            server = serve_ops(dashboard, metrics, host=host, port=port)
        except OSError as exc:
            raise OSError(
                f"cannot listen on {listen_addr} ({exc.strerror or exc}): "
                "set LLM_SCHEDULER_LISTEN_ADDR to a free host:port"
            ) from exc
    return Ops(dashboard, metrics, server, [dashboard, metrics])
