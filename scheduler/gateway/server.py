"""Serving the gateway: uvicorn with uvloop and httptools, in the foreground (the CLI) or on a
thread of its own (the demo, the bench)."""

from __future__ import annotations

import threading
import time

import uvicorn

from scheduler.gateway.app import Gateway
from scheduler.gateway.config import GatewayConfig


def uvicorn_config(gateway: Gateway) -> uvicorn.Config:
    c = gateway.config
    return uvicorn.Config(
        gateway.app(), host=c.host, port=c.port, loop="uvloop", http="httptools",
        lifespan="on", access_log=False, log_level="warning", proxy_headers=False,
        log_config=None,  # the process's logging stays as it is (the gateway logs its own)
        # SIGTERM: stop accepting, let the requests in flight finish for this long.
        timeout_graceful_shutdown=int(c.drain_timeout_s) if c.drain_timeout_s else None,
        timeout_keep_alive=30, backlog=4096,
    )  # fmt: skip


def serve(config: GatewayConfig) -> None:
    """Run until SIGTERM or SIGINT (uvicorn's handlers), drained, then return."""
    uvicorn.Server(uvicorn_config(Gateway(config))).run()


class GatewayThread:
    """A gateway on a thread of its own, on its own event loop; `url` once started."""

    def __init__(self, config: GatewayConfig) -> None:
        self.gateway = Gateway(config)
        self.server = uvicorn.Server(uvicorn_config(self.gateway))
        self.thread = threading.Thread(target=self._run, name="gateway", daemon=True)
        self.url = ""

    def _run(self) -> None:
        import uvloop

        loop = uvloop.new_event_loop()
        try:
            loop.run_until_complete(self.server.serve())
        finally:
            loop.close()

    def start(self, timeout_s: float = 10.0) -> GatewayThread:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.gateway.config.host}:{port}"
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
