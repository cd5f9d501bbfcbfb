"""Run an ASGI app on loopback in a background thread with its own event loop."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import uvicorn


@dataclass
class RunningServer:
    host: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread
    loop: asyncio.AbstractEventLoop | None = field(default=None)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)


def _bind(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto is
    # IPPROTO_TCP, and without it Nagle + delayed ACK add ~40 ms to every keep-alive request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


def serve_in_thread(
    app: Any, port: int = 0, host: str = "127.0.0.1", name: str = "standin"
) -> RunningServer:
    """Start `app` on host:port (0 = any free port); return once it accepts connections."""
    sock = _bind(host, port)
    actual_port = sock.getsockname()[1]
    # A blocking query (up to its `wait`) holds its connection open: on stop, what is still
    # being answered is cut rather than waited for (a second per server and test, before).
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=0
    )
    server = uvicorn.Server(config)
    started = threading.Event()
    holder: dict[str, asyncio.AbstractEventLoop] = {}

    def _run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        holder["loop"] = loop

        async def _main() -> None:
            serve = asyncio.ensure_future(server.serve(sockets=[sock]))
            while not server.started and not serve.done():
                await asyncio.sleep(0.005)
            started.set()
            await serve

        try:
            loop.run_until_complete(_main())
        finally:
            started.set()
            loop.close()

    thread = threading.Thread(target=_run, name=f"{name}:{actual_port}", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError(f"{name} did not start on {host}:{actual_port}")
    if not server.started:
        raise RuntimeError(f"{name} failed to start on {host}:{actual_port}")
    return RunningServer(host, actual_port, server, thread, holder.get("loop"))
