"""/v1/status/leader, /v1/status/peers and a minimal /v1/agent/self (clients poke them)."""

from __future__ import annotations

import os
import platform
import sys
import threading

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.context import DATACENTER, RouteContext
from llm_scheduler_standins.consul.httpkit import json_response

LEADER_ADDRESS = "127.0.0.1:8300"
VERSION = "1.22.0"


class AgentRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/v1/status/leader", self.leader, methods=["GET"]),
            Route("/v1/status/peers", self.peers, methods=["GET"]),
            Route("/v1/agent/self", self.agent_self, methods=["GET"]),
        ]

    async def leader(self, request: Request) -> Response:
        return json_response(LEADER_ADDRESS, request)

    async def peers(self, request: Request) -> Response:
        return json_response([LEADER_ADDRESS], request)

    def _stats(self) -> dict[str, dict[str, str]]:
        store = self.ctx.store
        with store.lock:
            services = len(store.services)
            last_index = store.index
        return {
            "agent": {
                "check_monitors": "0",
                "check_ttls": "0",
                "checks": str(services),
                "services": str(services),
            },
            "build": {
                "prerelease": "",
                "revision": "standin",
                "version": VERSION,
                "version_metadata": "",
            },
            "consul": {
                "acl": "enabled" if self.ctx.acl is not None else "disabled",
                "bootstrap": "true",
                "known_datacenters": "1",
                "leader": "true",
                "leader_addr": LEADER_ADDRESS,
                "server": "true",
            },
            "raft": {
                "applied_index": str(last_index),
                "commit_index": str(last_index),
                "last_log_index": str(last_index),
                "num_peers": "0",
                "state": "Leader",
            },
            "runtime": {
                "arch": platform.machine() or "amd64",
                "cpu_count": str(os.cpu_count() or 1),
                "goroutines": str(threading.active_count()),
                "max_procs": str(os.cpu_count() or 1),
                "os": sys.platform,
                "version": "go1.23.6",
            },
        }

    async def agent_self(self, request: Request) -> Response:
        node = self.ctx.store.agent_node
        body = {
            "Config": {
                "Datacenter": DATACENTER,
                "PrimaryDatacenter": DATACENTER,
                "NodeName": node,
                "NodeID": "00000000-0000-0000-0000-00000000c0de",
                "Revision": "standin",
                "Server": True,
                "Version": VERSION,
                "BuildDate": "2025-01-01T00:00:00Z",
            },
            "DebugConfig": {},
            "Coord": None,
            "Member": {
                "Name": node,
                "Addr": "127.0.0.1",
                "Port": 8301,
                "Tags": {"role": "consul", "dc": DATACENTER, "build": VERSION},
                "Status": 1,
            },
            # agent/agent_endpoint.go AgentSelf: Stats from agent.Stats(), all values strings.
            "Stats": self._stats(),
            "Meta": {"consul-network-segment": ""},
            "xDS": None,
        }
        return json_response(body, request)
