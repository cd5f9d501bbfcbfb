"""The gateway's cost and its wake-up speed, side by side with the stand-in model server
reached directly, in one run. Prints JSON.

- added latency: p50/p99 at fixed open-loop rates (default 200 and 1000 requests/s), without
  and with streaming (time to first byte and to the last byte), direct and through the gateway;
- the most requests/s one gateway process sustains with p99 under 50 ms;
- a held request's first byte after its replica turns healthy (its /health answers and its
  Consul check passes at the same moment);
- scale from zero end to end on the stand-ins: scheduler, Nomad and Consul stand-ins, the
  gateway, a cold start of `--cold-start-s`.

The stand-ins (Consul, the model servers) run in a process of their own, the gateway in
another (`llm-scheduler gateway`), the load generator in this one: a small keep-alive HTTP/1.1
client on asyncio, so that its own cost is small and the same on both paths. Loopback only;
every loop is bounded in requests and seconds.

    .venv/bin/python -m bench.gateway --rates 200,1000 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import httpx

MODEL = "bench"
BODY = {"model": MODEL, "prompt": "a", "max_tokens": 16}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- the stand-ins' process


def _standins(conn: Connection) -> None:
    """Consul and the model servers, driven by commands over a pipe."""
    from llm_scheduler_standins.consul.standin import ConsulStandin
    from llm_scheduler_standins.model_server import ModelServers, QueueModel
    from llm_scheduler_standins.registry import ServiceInstance

    consul = ConsulStandin()
    server = consul.start()
    servers = ModelServers(QueueModel(capacity=1e9, base_ttft_s=0.0, base_itl_s=0.0))
    conn.send(server.url)
    while True:
        cmd, *args = conn.recv()
        if cmd == "stop":
            break
        if cmd == "serve":
            conn.send(servers.start(args[0], MODEL, "vllm", args[1]))
        elif cmd == "register":
            sid, port, status = args
            consul.register_service(ServiceInstance(
                id=sid, name=f"llm-{MODEL}", node_id="n1", node_name="consul-standin",
                address="127.0.0.1", port=port, check_status=status,
            ))  # fmt: skip
            conn.send(True)
        elif cmd == "healthy":  # its server answers and its check passes, together
            sid, port = args
            servers.start(sid, MODEL, "vllm", port)
            consul.set_check_status(sid, "passing")
            conn.send(time.perf_counter())
        elif cmd == "forget":
            consul.deregister_service(args[0])
            servers.stop(args[0])
            conn.send(True)
        elif cmd == "kv":
            consul.kv_put(args[0], args[1])
            conn.send(True)
    servers.close()
    consul.close()


# ---------------------------------------------------------------- the load generator


class Pool:
    """Keep-alive HTTP/1.1 connections to one host:port; one request per connection at once."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def request(self, path: str, body: bytes) -> tuple[int, float, float]:
        """(status, seconds to the first body byte, seconds to the last)."""
        reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection(
            "127.0.0.1", self.port)  # fmt: skip
        started = time.perf_counter()
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
        )
        status = int((await reader.readline()).split()[1])
        length, chunked = 0, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        first = 0.0
        if chunked:
            while (size := int((await reader.readline()).strip() or b"0", 16)) > 0:
                await reader.readexactly(size + 2)
                first = first or time.perf_counter() - started
            await reader.readline()
        else:
            await reader.readexactly(length)
            first = time.perf_counter() - started
        self.idle.append((reader, writer))
        return status, first, time.perf_counter() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3) if values else -1


async def _open_loop(port: int, rate: float, seconds: float, stream: bool) -> dict[str, Any]:
    """`rate` requests/s for `seconds`, each timed from when it was due (a late start counts)."""
    pool, body = Pool(port), json.dumps({**BODY, "stream": stream}).encode()
    firsts: list[float] = []
    totals: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        await asyncio.sleep(max(due - time.perf_counter(), 0))
        late = time.perf_counter() - due
        try:
            status, first, total = await pool.request("/v1/completions", body)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            errors += 1
            return
        if status != 200:
            errors += 1
        firsts.append(late + first)
        totals.append(late + total)

    start = time.perf_counter() + 0.05
    count = int(rate * seconds)
    await asyncio.gather(*(one(start + i / rate) for i in range(count)))
    return {"requests": count, "errors": errors, "ttfb_p50_ms": _pct(firsts, 0.5),
            "ttfb_p99_ms": _pct(firsts, 0.99), "p50_ms": _pct(totals, 0.5),
            "p99_ms": _pct(totals, 0.99)}  # fmt: skip


def _side_by_side(direct: int, gateway: int, rate: float, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stream in (False, True):
        d = asyncio.run(_open_loop(direct, rate, seconds, stream))
        g = asyncio.run(_open_loop(gateway, rate, seconds, stream))
        row = {"direct": d, "gateway": g}
        for k in ("p50_ms", "p99_ms") + (("ttfb_p50_ms", "ttfb_p99_ms") if stream else ()):
            row[f"added_{k}"] = round(g[k] - d[k], 3)
            row[f"ratio_{k}"] = round(g[k] / d[k], 2) if d[k] > 0 else None
        out["streaming" if stream else "plain"] = row
    return out


def _max_rate(port: int, seconds: float, top: int) -> dict[str, Any]:
    """Raise the rate until p99 passes 50 ms or requests fail; the last rate that held."""
    best, tried = 0, []
    rate = 200
    while rate <= top:
        r = asyncio.run(_open_loop(port, rate, seconds, False))
        tried.append({"rate": rate, "p99_ms": r["p99_ms"], "errors": r["errors"]})
        if r["p99_ms"] > 50 or r["errors"]:
            break
        best = rate
        rate = int(rate * 1.5)
    return {"max_rps_p99_under_50ms": best, "steps": tried}


# ---------------------------------------------------------------- waking


def _held(ctl: Connection, gateway_url: str, reps: int) -> dict[str, Any]:
    """A request held for a replica that is registered but critical, with nothing listening;
    then the server starts and the check passes at one moment: how long to the first byte."""
    waits = []
    with httpx.Client(timeout=30) as client:
        for i in range(reps):
            sid, port = f"held-{i}", _free_port()
            ctl.send(("register", sid, port, "critical"))
            ctl.recv()
            time.sleep(0.3)  # the gateway's watch has it
            done: dict[str, float] = {}

            def send(done: dict[str, float] = done) -> None:
                with client.stream("POST", f"{gateway_url}/v1/completions", json=BODY) as r:
                    next(r.iter_raw())
                    done["first"] = time.perf_counter()

            t = threading.Thread(target=send)
            t.start()
            time.sleep(0.4)  # held by now
            ctl.send(("healthy", sid, port))
            healthy_at = ctl.recv()
            t.join(10)
            waits.append(done.get("first", float("inf")) - healthy_at)
            ctl.send(("forget", sid))
            ctl.recv()
            time.sleep(0.3)
    return {"reps": reps, "p50_ms": _pct(waits, 0.5), "p99_ms": _pct(waits, 0.99),
            "max_ms": _pct(waits, 1.0)}  # fmt: skip


def _from_zero(models: int, cold_start_s: float) -> dict[str, Any]:
    """Whole loop on the stand-ins: a request for a model at zero, to its first byte."""
    import logging

    from llm_scheduler_standins.devcluster import DevCluster
    from llm_scheduler_standins.model_server import QueueModel
    from scheduler.adapters.kv_layout import KVLayout
    from scheduler.gateway.config import GatewayConfig
    from scheduler.gateway.server import GatewayThread
    from scheduler.service.config import ServiceConfig
    from scheduler.service.logs import configure_logging
    from scheduler.service.loop import Service

    configure_logging("json", level=logging.WARNING)
    kv = KVLayout()
    waits = []
    with DevCluster(load_delay_s=cold_start_s, model_servers=True) as dc:
        assert dc.servers is not None
        dc.servers.queue = QueueModel(base_ttft_s=0.0, base_itl_s=0.0)
        serve = {"source": "org/m", "runtime": "vllm"}
        for i in range(models):
            value = {"owner": "org/a", "scaling": {"min": 0, "max": 1, "on_demand": True},
                     "profiles": [{"name": "one", "gpus": 1}], "serve": serve}  # fmt: skip
            dc.consul.kv_put(kv.model_key(f"m{i}"), json.dumps(value))
        config = ServiceConfig(consul_addr=dc.consul_url, nomad_addr=dc.nomad_url,
                               pass_interval_s=1.0, debounce_s=0.02, watch_wait_s=2.0,
                               session_ttl_s=10, lock_delay_s=0)  # fmt: skip
        svc = Service(config)
        svc.run_in_thread()
        gw = GatewayThread(GatewayConfig(consul_addr=dc.consul_url, port=0, watch_wait_s=2.0,
                                         log_requests=False)).start()  # fmt: skip
        try:
            time.sleep(1.0)
            for i in range(models):
                started = time.perf_counter()
                body = {"model": f"m{i}", "prompt": "a", "max_tokens": 1}
                reply = httpx.post(f"{gw.url}/v1/completions", json=body, timeout=60)
                assert reply.status_code == 200, reply.text
                waits.append(time.perf_counter() - started)
        finally:
            gw.stop()
            svc.stop()
    over = [w - cold_start_s for w in waits]
    return {"models": models, "cold_start_s": cold_start_s, "wait_p50_ms": _pct(waits, 0.5),
            "wait_max_ms": _pct(waits, 1.0), "beyond_cold_start_p50_ms": _pct(over, 0.5),
            "beyond_cold_start_max_ms": _pct(over, 1.0)}  # fmt: skip


# ---------------------------------------------------------------- main


def _gateway(consul_url: str) -> tuple[subprocess.Popen[bytes], str, int]:
    port = _free_port()
    env = {**os.environ, "CONSUL_HTTP_ADDR": consul_url,
           "LLM_SCHEDULER_GATEWAY_LOG_REQUESTS": "false",
           "LLM_SCHEDULER_GATEWAY_WATCH_WAIT_S": "5"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", "gateway", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).json()["data"][0]["ready"]:
                return proc, url, port
        except (httpx.HTTPError, IndexError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the gateway did not become ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="200,1000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--max-seconds", type=float, default=3.0)
    ap.add_argument("--max-top", type=int, default=5000)
    ap.add_argument("--held-reps", type=int, default=20)
    ap.add_argument("--zero-models", type=int, default=5)
    ap.add_argument("--cold-start-s", type=float, default=1.0)
    args = ap.parse_args()
    parent, child = mp.Pipe()
    standins = mp.get_context("spawn").Process(target=_standins, args=(child,), daemon=True)
    standins.start()
    consul_url = parent.recv()
    parent.send(("kv", f"llm-scheduler/models/{MODEL}", "{}"))
    parent.recv()
    direct = _free_port()
    parent.send(("serve", "direct", direct))
    parent.recv()
    parent.send(("register", "direct", direct, "passing"))
    parent.recv()
    proc, url, port = _gateway(consul_url)
    try:
        result: dict[str, Any] = {"cpus": os.cpu_count(), "rates": {}}
        for rate in (float(r) for r in args.rates.split(",")):
            result["rates"][str(int(rate))] = _side_by_side(direct, port, rate, args.seconds)
        result["direct_max"] = _max_rate(direct, args.max_seconds, args.max_top)
        result["gateway_max"] = _max_rate(port, args.max_seconds, args.max_top)
        parent.send(("forget", "direct"))
        parent.recv()
        result["held_first_byte"] = _held(parent, url, args.held_reps)
    finally:
        proc.terminate()
        proc.wait(30)
        parent.send(("stop",))
        standins.join(10)
    if args.zero_models:
        result["scale_from_zero"] = _from_zero(args.zero_models, args.cold_start_s)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
