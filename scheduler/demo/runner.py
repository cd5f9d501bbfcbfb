"""Run the demo: stand-ins up, catalog and quotas in, the real service and the gateway on them,
the trace played as real requests through the gateway, the live view drawn, a summary at the
end (with how long the first request of each wake from zero waited)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

# The stand-ins at import time: `llm-scheduler demo` reports a missing `standins` extra before
# it starts anything.
from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_server import QueueModel
from scheduler.adapters.kv_layout import KVLayout
from scheduler.demo import catalog, trace
from scheduler.demo.traffic import Traffic
from scheduler.demo.view import DemoStats, plain_line, render, summary
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.server import GatewayThread
from scheduler.ops.catalog_io import kv_value
from scheduler.ops.dashboard import DashboardObserver, serve_ops
from scheduler.ops.http_server import RunningServer
from scheduler.ops.metrics import MetricsObserver

if TYPE_CHECKING:
    from scheduler.service.config import ServiceConfig
    from scheduler.service.loop import Service

DEMO_PREFIX = "llm-scheduler-demo/"
DASHBOARD_PORT = 9464  # the port README and `llm-scheduler run` use
# Blocking-query wait of the demo's watches: short, so that stopping waits for them briefly.
WATCH_WAIT_S = 2.0


@dataclass
class DemoOptions:
    duration_s: float = 120.0
    speed: float = 1.0
    dashboard_port: int | None = DASHBOARD_PORT  # None: no web dashboard; 0: any free port
    live: bool | None = None  # None: a live view when stdout is a terminal
    plain_every_s: float = 10.0
    tick_s: float = 0.5
    log_file: Path | None = None


@dataclass
class DemoResult:
    stats: DemoStats
    seconds: float
    gpus_total: int
    final_state: dict[str, Any]
    log_file: Path
    dashboard_url: str | None = None
    demand_writes: int = 0
    requests: int = 0
    wakes: list[tuple[str, float]] = field(default_factory=list)  # model, first request's wait
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. the port fallback, an unclean stop


def _seed(client: Any, kv: KVLayout, speed: float) -> None:
    for model in catalog.MODELS:
        client.kv.put(kv.model_key(model.name), json.dumps(kv_value(model)))
    for quota in catalog.QUOTAS:
        client.kv.put(kv.quota_key(quota.owner), json.dumps(kv_value(quota)))
    client.kv.put(kv.settings, catalog.settings(speed).model_dump_json())


def log_path(requested: Path | None) -> Path:
    """One log per run: the file asked for, or a new one named by its start time."""
    if requested is not None:
        return requested
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    fd, name = tempfile.mkstemp(prefix=f"llm-scheduler-demo-{stamp}-", suffix=".log")
    os.close(fd)
    return Path(name)


def serve_dashboard(*observers: object, port: int) -> tuple[RunningServer, str | None]:
    """Serve on `port`; when it is taken, on any free port, with a line that says so."""
    try:
        return serve_ops(*observers, port=port), None
    except OSError as exc:
        if port == 0:
            raise
        server = serve_ops(*observers, port=0)
        why = exc.strerror or str(exc)
        return server, (
            f"dashboard: port {port} is not free ({why}; another demo or `llm-scheduler run`?), "
            f"so it is on {server.url}/ instead"
        )


def _quiet_logs(path: Path) -> IO[str]:
    """The service logs go to a file: the terminal belongs to the live view."""
    import logging

    import structlog

    handle = path.open("w", encoding="utf-8")
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=handle),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(stream=handle, level=logging.WARNING, force=True)
    return handle


def _restore_logs() -> None:
    """Give logging back before the file closes: anything still running in this process (an
    embedding test, a second demo) must not write to a closed file."""
    import logging

    import structlog

    structlog.reset_defaults()
    logging.basicConfig(level=logging.WARNING, force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True


def _route_server_logs(handle: IO[str]) -> None:
    """uvicorn installs its own stderr handlers each time a server starts; send them to the log."""
    import logging

    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = [logging.StreamHandler(handle)]
        logger.propagate = False


def run_demo(opts: DemoOptions, console: Console) -> DemoResult:
    from scheduler.ops.connect import consul_client
    from scheduler.service.loop import Service

    speed = max(opts.speed, 0.1)
    log_file = log_path(opts.log_file)
    log_handle = _quiet_logs(log_file)
    notes: list[str] = []
    live_view = console.is_terminal if opts.live is None else opts.live
    dash, metrics, stats = DashboardObserver(), MetricsObserver(), DemoStats()
    kv = KVLayout(DEMO_PREFIX)
    lines: list[str] = []
    with console.status("starting the Consul and Nomad stand-ins", spinner="dots"):
        dev = DevCluster(load_delay_s=1.0 / speed, model_servers=True).start()
    try:
        client = consul_client(dev.consul_url)
        _seed(client, kv, speed)
        if dev.servers is not None:
            # The demo's usual request target; 16 tokens of 0.15 s: a request takes about 2.5 s.
            dev.servers.queue = QueueModel(capacity=16.0, base_itl_s=0.15)
        config = _service_config(dev, speed)
        server = None
        if opts.dashboard_port is not None:
            server, note = serve_dashboard(dash, metrics, port=opts.dashboard_port)
            if note:
                notes.append(note)
                console.print(note, highlight=False, soft_wrap=True, markup=False)
        url = server.url if server else None
        service = Service(config, observers=[dash, metrics, stats])
        service.run_in_thread()
        gateway = _gateway(dev.consul_url, speed)
        _route_server_logs(log_handle)  # the dashboard's and the gateway's uvicorn
        traffic = Traffic(gateway.url)
        started = time.monotonic()
        try:
            _play(opts, console, live_view, dash, started, traffic, url, lines)
        except KeyboardInterrupt:
            lines.append("interrupted")
        finally:
            seconds = time.monotonic() - started
            with console.status("stopping the scheduler", spinner="dots"):
                _stop_all(traffic, gateway, service, notes)
                if server:
                    server.stop()
        final = dash.state()
    finally:
        dev.stop()
        _restore_logs()
        log_handle.close()
    gpus_total = int((final.get("totals") or {}).get("gpus", 0))
    writes = gateway.gateway.demand.writes if gateway.gateway.demand else 0
    wakes = list(gateway.gateway.state.wakes)
    return DemoResult(stats, seconds, gpus_total, final, log_file, url, writes,
                      traffic.stats.requests, wakes, lines, notes)  # fmt: skip


def _stop_all(traffic: Traffic, gateway: GatewayThread, service: Service, notes: list[str]) -> None:
    """The clients, the gateway, the service, all of it, before the stand-ins: a blocking query
    the stand-in is still answering when it stops ends in a CancelledError traceback. Consul
    answers a blocking query it has no news for only when its wait ends, even after the
    client went away: the gateway's last ones end within WATCH_WAIT_S and its jitter."""
    traffic.stop()
    gateway.stop()
    gateway_stopped = time.monotonic()
    service.stop()
    if not service.join_watches(WATCH_WAIT_S * 1.2 + 2):
        notes.append("some watches were still waiting when the stand-ins stopped")
    time.sleep(max(0.0, gateway_stopped + WATCH_WAIT_S * 1.1 + 0.2 - time.monotonic()))


def _gateway(consul_url: str, speed: float) -> GatewayThread:
    """The gateway the demo's clients go through, on a free port, writing demand on demo time."""
    config = GatewayConfig(
        consul_addr=consul_url, kv_prefix=DEMO_PREFIX, port=0, watch_wait_s=WATCH_WAIT_S,
        log_requests=False, demand_heartbeat_s=max(1.0, 5.0 / speed), session_ttl_s=10,
        drain_timeout_s=2.0,
    )  # fmt: skip
    return GatewayThread(config).start()


def _service_config(dev: DevCluster, speed: float) -> ServiceConfig:
    from scheduler.service.config import ServiceConfig

    return ServiceConfig(
        consul_addr=dev.consul_url, nomad_addr=dev.nomad_url, kv_prefix=DEMO_PREFIX,
        pass_interval_s=max(0.5, 2.0 / speed), debounce_s=0.2, watch_wait_s=WATCH_WAIT_S,
        session_ttl_s=10, lock_delay_s=0, log_format="json",
        # Scaling on the stand-in model servers' own metrics, on demo time.
        signals="scrape", signal_window_s=max(2.0, 6.0 / speed),
        signal_interval_s=max(0.5, 1.0 / speed),
    )  # fmt: skip


def _play(
    opts: DemoOptions, console: Console, live_view: bool, dash: DashboardObserver,
    started: float, traffic: Traffic, url: str | None, lines: list[str],
) -> None:  # fmt: skip
    from rich.live import Live

    next_plain = 0.0

    def mmss(seconds: float) -> str:
        return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"

    def clock(elapsed: float) -> str:
        return f"{mmss(elapsed)}/{mmss(opts.duration_s)}"

    live = Live(console=console, refresh_per_second=4, transient=False) if live_view else None
    if url and not live:
        console.print(f"dashboard: {url}/ (while the demo runs)", highlight=False)
    if live:
        live.start()
    try:
        while True:
            elapsed = time.monotonic() - started
            t = min(elapsed / opts.duration_s, 1.0)
            traffic.set_targets({m: d.inflight + d.queued for m, d in trace.demand_at(t).items()})
            state = dash.state()
            if live:
                live.update(render(state, clock(elapsed), trace.phase(t), url))
            elif elapsed >= next_plain:
                line = plain_line(state, clock(elapsed), trace.phase(t))
                console.print(line, highlight=False, soft_wrap=True, markup=False)
                lines.append(line)
                next_plain += opts.plain_every_s
            if elapsed >= opts.duration_s:
                return
            time.sleep(min(opts.tick_s, max(0.0, opts.duration_s - elapsed)))
    finally:
        if live:
            live.stop()


def summary_lines(result: DemoResult) -> list[str]:
    lines = summary(result.stats, result.seconds, result.gpus_total)
    lines.append(
        f"  traffic: {result.requests} requests through the gateway; its demand key was "
        f"written {result.demand_writes} times"
    )
    if result.wakes:
        waits = ", ".join(f"{model} {waited:.1f} s" for model, waited in result.wakes)
        lines.append(f"  woken from zero ({len(result.wakes)}), first request waited: {waits}")
    else:
        lines.append("  woken from zero: none (every model had a replica when asked)")
    lines += [f"  note: {n}" for n in result.notes]
    lines.append(f"  service log (this run only): {result.log_file}")
    return lines
