"""/v1/status/leader, /v1/status/peers and a minimal /v1/agent/self (clients poke them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler.standins.consul.context import DATACENTER, RouteContext
from scheduler.standins.consul.httpkit import json_response

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
            "Stats": {},
            "Meta": {"consul-network-segment": ""},
            "xDS": None,
        }
        return json_response(body, request)
