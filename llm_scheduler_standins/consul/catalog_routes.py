"""/v1/health/service/<name>, /v1/health/state/<state>, /v1/catalog/service/<name>,
/v1/catalog/services (all blocking).

Filled through ServiceRegistry by the Nomad stand-in; every instance has the node's
serfHealth check (passing) and one service check whose status Nomad sets.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llm_scheduler_standins.consul.context import DATACENTER, RouteContext
from llm_scheduler_standins.consul.httpkit import blocking_query, has_flag, json_response, read_meta
from llm_scheduler_standins.consul.tables import CatalogService


def _node_json(service: CatalogService) -> dict[str, Any]:
    return {
        "ID": service.node_id,
        "Node": service.node_name,
        "Address": service.address,
        "Datacenter": DATACENTER,
        "TaggedAddresses": {"lan": service.address, "wan": service.address},
        "Meta": {"consul-network-segment": ""},
        "CreateIndex": service.create_index,
        "ModifyIndex": service.create_index,
    }


def _service_json(service: CatalogService) -> dict[str, Any]:
    return {
        "ID": service.id,
        "Service": service.name,
        "Tags": list(service.tags),
        "Address": service.address,
        "Meta": dict(service.meta),
        "Port": service.port,
        "Weights": {"Passing": 1, "Warning": 1},
        "EnableTagOverride": False,
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    }


def _check_json(
    service: CatalogService, check_id: str, name: str, status: str, *, of_service: bool
) -> dict[str, Any]:
    return {
        "Node": service.node_name,
        "CheckID": check_id,
        "Name": name,
        "Status": status,
        "Notes": "",
        "Output": "",
        "ServiceID": service.id if of_service else "",
        "ServiceName": service.name if of_service else "",
        "ServiceTags": list(service.tags) if of_service else [],
        "Type": "ttl" if of_service else "",
        "Definition": {},
        "CreateIndex": service.create_index,
        "ModifyIndex": service.check_modify_index if of_service else service.create_index,
    }


def health_entry_json(service: CatalogService) -> dict[str, Any]:
    return {
        "Node": _node_json(service),
        "Service": _service_json(service),
        "Checks": [
            _check_json(service, "serfHealth", "Serf Health Status", "passing", of_service=False),
            _check_json(
                service,
                f"service:{service.id}",
                f"Service '{service.name}' check",
                service.check_status,
                of_service=True,
            ),
        ],
    }


def catalog_entry_json(service: CatalogService) -> dict[str, Any]:
    return {
        "ID": service.node_id,
        "Node": service.node_name,
        "Address": service.address,
        "Datacenter": DATACENTER,
        "TaggedAddresses": {"lan": service.address, "wan": service.address},
        "NodeMeta": {"consul-network-segment": ""},
        "ServiceKind": "",
        "ServiceID": service.id,
        "ServiceName": service.name,
        "ServiceTags": list(service.tags),
        "ServiceAddress": service.address,
        "ServiceWeights": {"Passing": 1, "Warning": 1},
        "ServiceMeta": dict(service.meta),
        "ServicePort": service.port,
        "ServiceEnableTagOverride": False,
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    }


HEALTH_STATES = ("any", "passing", "warning", "critical", "maintenance")


class CatalogRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/v1/health/service/{name}", self.health_service, methods=["GET"]),
            Route("/v1/health/state/{state}", self.health_state, methods=["GET"]),
            Route("/v1/catalog/service/{name}", self.catalog_service, methods=["GET"]),
            Route("/v1/catalog/services", self.catalog_services, methods=["GET"]),
        ]

    async def _query(self, request: Request, pick: Any) -> tuple[Any, int]:
        self.ctx.caller(request)
        store = self.ctx.store

        def query() -> tuple[Any, int]:
            with store.lock:
                services = sorted(store.services.values(), key=lambda s: (s.node_name, s.id))
                return pick(services), max(store.catalog_index, 1)

        result: tuple[Any, int] = await blocking_query(
            store, self.ctx.blocking(request), query, lambda r: r[1]
        )
        return result

    def _matching(self, request: Request, services: list[CatalogService]) -> list[CatalogService]:
        name = request.path_params["name"]
        tags = request.query_params.getlist("tag")
        return [s for s in services if s.name == name and all(t in s.tags for t in tags)]

    async def health_service(self, request: Request) -> Response:
        passing_only = has_flag(request, "passing")

        def pick(services: list[CatalogService]) -> list[dict[str, Any]]:
            chosen = self._matching(request, services)
            if passing_only:
                chosen = [s for s in chosen if s.check_status == "passing"]
            return [health_entry_json(s) for s in chosen]

        body, index = await self._query(request, pick)
        return json_response(body, request, {**read_meta(index), **self.ctx.acl_headers()})

    async def health_state(self, request: Request) -> Response:
        """Every check in a state (`any` for all), one serfHealth per node as Consul lists."""
        state = request.path_params["state"]
        if state not in HEALTH_STATES:
            return Response(f"Invalid state: {state}", status_code=400, media_type="text/plain")

        def pick(services: list[CatalogService]) -> list[dict[str, Any]]:
            checks: list[dict[str, Any]] = []
            nodes: set[str] = set()
            for s in services:
                if s.node_name not in nodes:
                    nodes.add(s.node_name)
                    checks.append(
                        _check_json(
                            s, "serfHealth", "Serf Health Status", "passing", of_service=False
                        )
                    )
                name = f"Service '{s.name}' check"
                checks.append(
                    _check_json(s, f"service:{s.id}", name, s.check_status, of_service=True)
                )
            return [c for c in checks if state == "any" or c["Status"] == state]

        body, index = await self._query(request, pick)
        return json_response(body, request, {**read_meta(index), **self.ctx.acl_headers()})

    async def catalog_service(self, request: Request) -> Response:
        body, index = await self._query(
            request,
            lambda services: [catalog_entry_json(s) for s in self._matching(request, services)],
        )
        return json_response(body, request, {**read_meta(index), **self.ctx.acl_headers()})

    async def catalog_services(self, request: Request) -> Response:
        def pick(services: list[CatalogService]) -> dict[str, list[str]]:
            names: dict[str, list[str]] = {"consul": []}
            for service in services:
                tags = names.setdefault(service.name, [])
                tags.extend(t for t in service.tags if t not in tags)
            return names

        body, index = await self._query(request, pick)
        return json_response(body, request, {**read_meta(index), **self.ctx.acl_headers()})
