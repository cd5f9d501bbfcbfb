"""HTTP plumbing shared by the Consul routes: errors, JSON bodies, query flags, blocking waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from llm_scheduler_standins.consul.durations import SECOND_NS, parse_go_duration
from llm_scheduler_standins.consul.store import ConsulStore

T = TypeVar("T")

DEFAULT_WAIT_S = 300.0
MAX_WAIT_S = 600.0
JITTER_FRACTION = 16


class ConsulHTTPError(Exception):
    """An error answered as plain text with a status code, as agent/http.go does."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def text_response(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return Response(text, status_code=status, media_type="text/plain", headers=headers)


def json_response(
    body: Any, request: Request, headers: dict[str, str] | None = None, status: int = 200
) -> Response:
    pretty = "pretty" in request.query_params
    text = json.dumps(body, indent=4 if pretty else None, separators=None if pretty else (",", ":"))
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def has_flag(request: Request, name: str) -> bool:
    """Consul checks flags like `recurse` for presence only: `?recurse=false` is recursive."""
    return name in request.query_params


def read_meta(index: int) -> dict[str, str]:
    return {
        "X-Consul-Index": str(max(index, 1)),
        "X-Consul-KnownLeader": "true",
        "X-Consul-LastContact": "0",
        "X-Consul-Effective-Consistency": "leader",
    }


def check_consistency(request: Request) -> None:
    if has_flag(request, "stale") and has_flag(request, "consistent"):
        raise ConsulHTTPError(400, "Cannot specify ?stale with ?consistent, conflicting semantics.")


@dataclass(frozen=True)
class BlockingParams:
    min_index: int  # 0: do not block
    timeout_s: float


def blocking_params(request: Request, *, max_wait_s: float, jitter: bool) -> BlockingParams:
    check_consistency(request)
    raw_index = request.query_params.get("index")
    min_index = 0
    if raw_index is not None and raw_index != "":
        try:
            min_index = int(raw_index)
            if min_index < 0:
                raise ValueError(raw_index)
        except ValueError:
            raise ConsulHTTPError(400, "Invalid index") from None
    wait_s = DEFAULT_WAIT_S
    raw_wait = request.query_params.get("wait")
    if raw_wait:
        try:
            wait_ns = parse_go_duration(raw_wait)
        except ValueError:
            raise ConsulHTTPError(400, "Invalid wait time") from None
        if wait_ns > 0:
            wait_s = wait_ns / SECOND_NS
    wait_s = min(wait_s, max_wait_s, MAX_WAIT_S)
    if jitter:
        wait_s += random.uniform(0, wait_s / JITTER_FRACTION)
    return BlockingParams(min_index, wait_s)


async def blocking_query(
    store: ConsulStore,
    params: BlockingParams,
    query: Callable[[], T],
    index_of: Callable[[T], int],
    keep_blocking: Callable[[T], bool] = lambda _result: False,
) -> T:
    """Run `query` until its index passes `params.min_index`, or the wait ends.

    `keep_blocking` re-blocks a result that has a newer index but no news for the watcher
    (a missing key that is still missing). An index reset abandons the wait at once.
    """
    if params.min_index <= 0:
        return query()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + params.timeout_s
    generation = store.generation
    while True:
        event = asyncio.Event()
        token = store.add_waiter(loop, event)  # subscribe before reading: no missed wake-up
        try:
            with store.lock:
                result = query()
                abandoned = store.generation != generation
            if abandoned or (index_of(result) > params.min_index and not keep_blocking(result)):
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                return result
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
        finally:
            store.remove_waiter(token)
