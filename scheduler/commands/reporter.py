"""`llm-scheduler reporter`: publish this node's NVML view of its GPUs to Consul KV.

Runs on every GPU node (jobspecs/gpu-reporter.nomad.hcl, a system job). The node id is the
Nomad node id, so the scheduler can join the record with Nomad's fingerprint: pass
`--node-id ${node.unique.id}` (the jobspec does), or set LLM_SCHEDULER_NODE_ID. Consul is
found through CONSUL_HTTP_ADDR / CONSUL_HTTP_TOKEN, or --consul-addr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from scheduler.reporter.cache_scan import CacheScanner

NODE_ID_ENV = ("LLM_SCHEDULER_NODE_ID", "NOMAD_NODE_ID")
FAKE_FLEETS = ("h100", "h200", "a100", "a100-mig", "failing", "missing")


def consul_client(addr: str | None) -> object:
    """A py-consul client; with no address, py-consul reads CONSUL_HTTP_ADDR / CONSUL_HTTP_TOKEN."""
    from consul.std import Consul

    if not addr:
        return Consul()
    scheme, _, rest = addr.rpartition("://")
    host, _, port = rest.partition(":")
    return Consul(host=host, port=int(port or 8500), scheme=scheme or "http")


def fake_nvml(fleet: str) -> object:
    from scheduler.reporter import fake_gpus as fakes
    from scheduler.reporter.fake_nvml import FakeNvml

    builders = {
        "h100": fakes.h100_fleet,
        "h200": fakes.h200_fleet,
        "a100": fakes.a100_fleet,
        "a100-mig": fakes.a100_mig_fleet,
        "failing": fakes.failing_fleet,
        "missing": list,
    }
    return FakeNvml(builders[fleet](), library_missing=fleet == "missing")


def _say(line: str) -> None:
    typer.echo(f"reporter: {line}", err=True)


def register(app: typer.Typer) -> None:
    @app.command("reporter")
    def reporter_cmd(
        node_id: str | None = typer.Option(
            None, "--node-id", help="Nomad node id (default: $LLM_SCHEDULER_NODE_ID)"
        ),
        interval: float = typer.Option(5.0, "--interval", help="seconds between reads"),
        ttl: int = typer.Option(15, "--ttl", help="Consul session TTL in seconds (10..86400)"),
        refresh: float = typer.Option(
            30.0, "--refresh", help="rewrite at most this often when only usage figures change"
        ),
        prefix: str = typer.Option("llm-scheduler/", "--prefix", help="Consul KV prefix"),
        consul_addr: str | None = typer.Option(
            None, "--consul-addr", help="http://host:port (default: $CONSUL_HTTP_ADDR)"
        ),
        once: bool = typer.Option(
            False, "--once", help="print one record as JSON and exit; writes nothing"
        ),
        fake: str | None = typer.Option(
            None, "--fake-nvml", hidden=True, help="use a fake GPU fleet"
        ),
        model_cache: str = typer.Option(
            "",
            "--model-cache",
            envvar="LLM_SCHEDULER_MODEL_CACHE",
            help="the model-cache volume's path on this node (the replicas' HF_HOME): its "
            "complete snapshots and free bytes are reported next to the GPUs; empty: none",
        ),
        model_cache_volume: str = typer.Option(
            "llm-model-cache", "--model-cache-volume", help="the Nomad host volume's name"
        ),
    ) -> None:
        """Read this node's GPUs through NVML every few seconds and keep them in Consul KV."""
        from scheduler.reporter.cache_scan import CacheScanner

        cache = CacheScanner(Path(model_cache), model_cache_volume) if model_cache else None
        run(node_id, interval, ttl, refresh, prefix, consul_addr, once, fake, cache)


def _node_or_exit(
    node_id: str | None, interval: float, ttl: int, once: bool, fake: str | None
) -> str | None:
    """The node id; exit 2 with one line naming the option when an option is wrong."""
    from scheduler.reporter.writer import MAX_TTL_S, MIN_TTL_S

    node = node_id or next((os.environ[v] for v in NODE_ID_ENV if os.environ.get(v)), None)
    if not node and not once:
        typer.echo(
            "no node id: pass --node-id (the jobspec passes ${node.unique.id}) "
            "or set LLM_SCHEDULER_NODE_ID",
            err=True,
        )
        raise typer.Exit(2)
    if not MIN_TTL_S <= ttl <= MAX_TTL_S:
        typer.echo(f"--ttl must be between {MIN_TTL_S} and {MAX_TTL_S} seconds", err=True)
        raise typer.Exit(2)
    if not 0 < interval < ttl:
        typer.echo(f"--interval must be more than 0 and less than --ttl ({ttl}s)", err=True)
        raise typer.Exit(2)
    if fake is not None and fake not in FAKE_FLEETS:
        typer.echo(f"--fake-nvml must be one of {', '.join(FAKE_FLEETS)}", err=True)
        raise typer.Exit(2)
    return node


def run(
    node_id: str | None,
    interval: float,
    ttl: int,
    refresh: float,
    prefix: str,
    consul_addr: str | None,
    once: bool,
    fake: str | None,
    cache: CacheScanner | None = None,
) -> None:
    """Read this node's GPUs through NVML every few seconds and keep them in Consul KV."""
    import signal
    import socket
    import threading

    from scheduler.adapters.kv_layout import KVLayout
    from scheduler.reporter.probe import NvmlProbe, NvmlUnavailable
    from scheduler.reporter.writer import ReportWriter, run_reporter, with_cache

    node = _node_or_exit(node_id, interval, ttl, once, fake)
    probe = NvmlProbe(
        node or "unknown",
        nvml=fake_nvml(fake) if fake else None,
        hostname=socket.gethostname(),
    )
    try:
        probe.open()
    except NvmlUnavailable as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from None
    if once:
        try:
            typer.echo(with_cache(probe.read(), cache).model_dump_json(indent=2))
        finally:
            probe.close()
        return

    assert node is not None
    key = KVLayout(prefix).node_gpus_key(node)
    writer = ReportWriter(
        consul_client(consul_addr),
        key,
        ttl_s=ttl,
        session_name=f"llm-scheduler-gpu-reporter {node}",
        refresh_s=refresh,
        log=_say,
    )
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    _say(f"writing {key} every {interval:g}s (session ttl {ttl}s)")
    run_reporter(probe, writer, interval_s=interval, stop=stop, log=_say, cache=cache)
    _say("stopped; session destroyed, record removed")
