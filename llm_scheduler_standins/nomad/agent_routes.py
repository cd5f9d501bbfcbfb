"""The Nomad stand-in's /v1/event/stream, /v1/status/leader, /v1/regions, /v1/agent/self.

Handlers of NomadStandin (server.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from llm_scheduler_standins.nomad.events import parse_topics
from llm_scheduler_standins.nomad.http_helpers import (
    HttpError,
    json_response,
    namespace_of,
    token_of,
)

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.server import NomadStandin


async def event_stream(server: NomadStandin, request: Request) -> Response:
    topics = parse_topics(request.query_params.getlist("topic"))
    namespace = namespace_of(request)
    if server.acl is not None:
        token = server.acl.token(token_of(request))
        if token is None:
            raise HttpError(403, "ACL token not found")
        # Nomad wants a management token for `*:*`; per-topic reads need read-job.
        if not token.management and ("*" in topics or not token.allows("read-job", namespace)):
            raise HttpError(403, "Permission denied")
    raw_index = request.query_params.get("index") or "0"
    try:
        start = int(raw_index)
    except ValueError as exc:
        raise HttpError(400, "Invalid index") from exc
    heartbeat = server.heartbeat_s

    async def frames() -> AsyncIterator[bytes]:
        cursor = max(start - 1, 0) if start else server.cluster.events.last_index()
        yield b"{}\n"
        with server.cluster.feed.subscribe() as sub:
            while True:
                for frame in server.cluster.events.since(cursor, topics, namespace):
                    cursor = frame["Index"]
                    yield json.dumps(frame).encode() + b"\n"
                if not await sub.wait(heartbeat):
                    yield b"{}\n"

    return StreamingResponse(frames(), media_type="application/json")


async def leader(server: NomadStandin, request: Request) -> Response:
    return json_response("127.0.0.1:4647")


async def regions(server: NomadStandin, request: Request) -> Response:
    return json_response([server.region])


async def agent_self(server: NomadStandin, request: Request) -> Response:
    return json_response(
        {
            "config": {
                "Region": server.region,
                "Datacenter": server.datacenter,
                "Version": {"Version": "1.10.5"},
            },
            "member": {
                "Name": "standin.global",
                "Addr": "127.0.0.1",
                "Port": 4648,
                "Tags": {"region": server.region, "dc": server.datacenter},
            },
            "stats": {},
        }
    )
