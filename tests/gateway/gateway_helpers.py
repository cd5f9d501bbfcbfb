"""The gateway on the stand-ins, on loopback: Consul and Nomad stand-ins with stand-in model
servers, the scheduler service, and gateways on threads or in processes of their own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.faults import Faults
from llm_scheduler_standins.model_server import QueueModel
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.server import GatewayThread
from scheduler.service.loop import Service
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    service_config,
    small_fleet,
    wait_for,
)

FAST_SERVERS = QueueModel(capacity=8.0, request_s=0.2, base_ttft_s=0.002, base_itl_s=0.002)
ONE_GPU = [{"name": "one", "gpus": 1}]


def gateway_config(dc: DevCluster, **extra: Any) -> GatewayConfig:
    values: dict[str, Any] = {
        "consul_addr": dc.consul_url,
        "port": 0,
        "watch_wait_s": 2.0,
        "demand_interval_s": 0.2,
        "demand_heartbeat_s": 1.0,
        "session_ttl_s": 10,
        "drain_timeout_s": 5.0,
        "log_requests": False,
        "signals_interval_s": 0.5,
    }
    values.update(extra)
    return GatewayConfig(**values)


@dataclass
class Stack:
    dc: DevCluster
    service: Service
    gateways: list[GatewayThread] = field(default_factory=list)

    def gateway(self, **extra: Any) -> GatewayThread:
        gw = GatewayThread(gateway_config(self.dc, **extra)).start()
        self.gateways.append(gw)
        wait_for(lambda: gw.gateway.state.catalog_read, what="the gateway's catalog")
        return gw

    def model(self, name: str, scaling: dict[str, Any], **fields: Any) -> None:
        put(self.dc, LAYOUT.model_key(name), model_value(ONE_GPU, scaling=scaling, **fields))

    def gateway_keys(self) -> dict[str, Any]:
        reply = httpx.get(f"{self.dc.consul_url}/v1/kv/{LAYOUT.gateways}?recurse")
        if reply.status_code == 404:
            return {}
        return {e["Key"]: e for e in reply.json()}


def stack(settings: dict[str, Any] | None = None, faults: Faults | None = None) -> Iterator[Stack]:
    with DevCluster(
        fleet=small_fleet(), load_delay_s=0.05, model_servers=True, faults=faults
    ) as dc:
        assert dc.servers is not None
        dc.servers.queue = FAST_SERVERS
        dc.consul.kv_put(LAYOUT.settings, json.dumps({**FAST_SETTINGS, **(settings or {})}))
        svc = Service(service_config(dc))
        svc.run_in_thread()
        st = Stack(dc, svc)
        try:
            yield st
        finally:
            for gw in st.gateways:
                gw.stop()
            svc.stop()


def client(url: str, api_key: str = "sk-test", **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, **kw)


def ready(gw: GatewayThread, model: str) -> bool:
    return bool(gw.gateway.state.of(model).usable())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """`llm-scheduler gateway` in a process of its own (to be killed or sent SIGTERM)."""

    def __init__(self, dc: DevCluster, instance: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.instance = instance
        environ = {
            **os.environ,
            "CONSUL_HTTP_ADDR": dc.consul_url,
            "LLM_SCHEDULER_GATEWAY_INSTANCE": instance,
            "LLM_SCHEDULER_GATEWAY_WATCH_WAIT_S": "2",
            "LLM_SCHEDULER_GATEWAY_SESSION_TTL_S": "10",
            "LLM_SCHEDULER_GATEWAY_DEMAND_INTERVAL_S": "0.2",
            **env,
        }
        command = [
            sys.executable,
            "-m",
            "scheduler.cli",
            "gateway",
            "--port",
            str(self.port),
            "--json",
        ]
        # A file, not a pipe: a full pipe would block the gateway. Closed by stop().
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            command, env=environ, stdout=subprocess.DEVNULL, stderr=self.log
        )
        wait_for(self._healthy, timeout=30, what="the gateway process")

    def log_lines(self) -> list[str]:
        self.log.seek(0)
        return self.log.read().decode().splitlines()

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the gateway exited: {self.log_lines()[-20:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def until(pred: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    return wait_for(pred, timeout=timeout, what=what)


def elapsed(since: float) -> float:
    return time.perf_counter() - since
