"""Placeholder, filled in next."""

from __future__ import annotations

from starlette.routing import Route

from scheduler.standins.consul.context import RouteContext


class TxnRoutes:
    def __init__(self, ctx: RouteContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return []
