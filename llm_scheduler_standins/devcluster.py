"""A Consul stand-in and a Nomad stand-in wired together, as a demo or test cluster.

The Nomad stand-in registers the services of running allocations in the Consul stand-in's
catalog, as a Nomad client does with its local Consul agent.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from llm_scheduler_standins.faults import Faults
from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.fleet_model import Node
from llm_scheduler_standins.model_cache import WeightsTiming
from llm_scheduler_standins.nomad import NomadStandin
from llm_scheduler_standins.runner import RunningServer

if TYPE_CHECKING:
    from llm_scheduler_standins.consul.acl import ConsulACL
    from llm_scheduler_standins.consul.standin import ConsulStandin
    from llm_scheduler_standins.model_server import ModelServers


def _consul_standin(faults: Faults | None, acl: ConsulACL | None = None) -> ConsulStandin:
    from llm_scheduler_standins.consul.standin import ConsulStandin

    return ConsulStandin(faults=faults, acl=acl)


class DevCluster:
    def __init__(
        self,
        fleet: list[Node] | None = None,
        consul_port: int = 0,
        nomad_port: int = 0,
        load_delay_s: float = 1.0,
        faults: Faults | None = None,
        model_servers: bool = False,
        consul_acl: ConsulACL | None = None,
        weights: WeightsTiming | None = None,
    ) -> None:
        """`model_servers`: run a stand-in model server (vLLM/SGLang metrics) for
        every running allocation that serves HTTP; `self.servers` sets their offered load.
        `weights`: allocations stay pending while they download (cold) or load their weights."""
        self.fleet = fleet if fleet is not None else builtin_fleet()
        self.consul_port = consul_port
        self.nomad_port = nomad_port
        self.load_delay_s = load_delay_s
        self.faults = faults
        self.consul_acl = consul_acl  # Consul in ACL mode (default deny) when set
        self.weights = weights
        self._consul: ConsulStandin | None = None
        self._nomad: NomadStandin | None = None
        self._consul_server: RunningServer | None = None
        self._nomad_server: RunningServer | None = None
        self.with_model_servers = model_servers
        self.servers: ModelServers | None = None

    def start(self) -> DevCluster:
        if self._nomad_server is not None:
            return self
        self._consul = _consul_standin(self.faults, self.consul_acl)
        self._consul_server = self._consul.start(self.consul_port)
        try:
            if self.with_model_servers:
                from llm_scheduler_standins.model_server import ModelServers

                self.servers = ModelServers()
            self._nomad = NomadStandin(
                self.fleet,
                registry=self._consul,
                load_delay_s=self.load_delay_s,
                faults=self.faults,
                model_servers=self.servers,
                weights=self.weights,
            )
            self._nomad_server = self._nomad.start(self.nomad_port)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._nomad is not None:
            self._nomad.stop()
        if self._consul is not None:
            self._consul.close()
        if self.servers is not None:
            self.servers.close()
            self.servers = None
        self._nomad_server = self._consul_server = None

    @property
    def consul(self) -> ConsulStandin:
        if self._consul is None:
            raise RuntimeError("DevCluster is not started")
        return self._consul

    @property
    def nomad(self) -> NomadStandin:
        if self._nomad is None:
            raise RuntimeError("DevCluster is not started")
        return self._nomad

    @property
    def consul_url(self) -> str:
        if self._consul_server is None:
            raise RuntimeError("DevCluster is not started")
        return self._consul_server.url

    @property
    def nomad_url(self) -> str:
        if self._nomad_server is None:
            raise RuntimeError("DevCluster is not started")
        return self._nomad_server.url

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
