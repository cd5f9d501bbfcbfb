"""`llm-scheduler devcluster`: serve a Consul and a Nomad stand-in on loopback until stopped."""

from __future__ import annotations

from typing import Any

import typer


def register(app: typer.Typer) -> None:
    @app.command("devcluster")
    def devcluster_cmd(
        consul_port: int = typer.Option(0, "--consul-port", help="0 picks a free port"),
        nomad_port: int = typer.Option(0, "--nomad-port", help="0 picks a free port"),
        fleet: str | None = typer.Option(
            None,
            "--fleet",
            help="YAML or JSON list of nodes (a snapshot's node format; each may have a "
            "`reserved: {cpu: MHz, memory: MB, reserved_ports: '22,8000-8010'}` block, as a "
            "Nomad client's, kept from every placement); default: the built-in fleet",
        ),
        load_delay: float = typer.Option(
            1.0, "--load-delay", min=0, help="seconds an allocation stays pending"
        ),
        model_servers: bool = typer.Option(
            True,
            "--model-servers/--no-model-servers",
            help="serve /health, /v1/models, the OpenAI endpoints and vLLM/SGLang /metrics for "
            "each running replica, on loopback, where its Consul service is registered (for "
            "`llm-scheduler gateway` and `LLM_SCHEDULER_SIGNALS=scrape llm-scheduler run`)",
        ),
    ) -> None:
        """Run embedded Consul and Nomad stand-ins (GPU fleet included) until Ctrl-C.

        Prints `export CONSUL_HTTP_ADDR=… NOMAD_ADDR=…` first, to paste into another shell."""
        import sys

        from scheduler.commands._standins import standins_missing

        try:
            from llm_scheduler_standins.devcluster import DevCluster
            from llm_scheduler_standins.fleet import FleetError, builtin_fleet, load_fleet
        except ModuleNotFoundError as exc:
            raise standins_missing("devcluster", exc) from None

        try:
            nodes = load_fleet(fleet) if fleet else builtin_fleet()
        except FleetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(code=2) from exc
        cluster = DevCluster(
            nodes, consul_port, nomad_port, load_delay_s=load_delay, model_servers=model_servers
        )
        try:
            cluster.start()
        except OSError as exc:
            print(f"error: cannot listen: {exc.strerror or exc}", file=sys.stderr)
            raise typer.Exit(code=1) from exc
        _serve_until_stopped(cluster, len(nodes))


def _serve_until_stopped(cluster: Any, nodes: int) -> None:
    """Print the line to paste, then serve until SIGINT or SIGTERM."""
    import signal
    import sys
    import threading

    done = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    line = f"export CONSUL_HTTP_ADDR={cluster.consul_url} NOMAD_ADDR={cluster.nomad_url}"
    print(line, flush=True)
    print(
        f"devcluster: {nodes} nodes; paste the line above into the shell that runs "
        "llm-scheduler; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not done.wait(0.5):
            pass
    finally:
        cluster.stop()
