"""Serve the ops ASGI app (dashboard, /metrics, /healthz) from a background thread.

The product's own helper: the stand-ins have theirs, and the product never imports them.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Any

import uvicorn


@dataclass
class RunningServer:
    host: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)


def _listen(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets of that proto;
    # without it Nagle and delayed ACK add ~40 ms to each keep-alive scrape.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def serve_in_thread(
    app: Any, port: int = 0, host: str = "127.0.0.1", name: str = "http"
) -> RunningServer:
    """Serve `app` on host:port (0: any free port); return once it accepts connections.

    Binding happens here, in the caller's thread, so a taken port raises OSError to it."""
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=1
        )
    )
    ready = threading.Event()

    async def _serve() -> None:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not (server.started or task.done()):
            await asyncio.sleep(0.005)
        ready.set()
        await task

    def _run() -> None:
        try:
            asyncio.run(_serve())
        finally:
            ready.set()

    thread = threading.Thread(target=_run, name=f"{name}:{bound}", daemon=True)
    thread.start()
    if not ready.wait(10) or not server.started:
        raise RuntimeError(f"{name} server did not start on {host}:{bound}")
    return RunningServer(host, bound, server, thread)
