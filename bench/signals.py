"""Scaling signals: scrape time at fleet size, and objective-to-job latency.

scrape: N stand-in model servers (vLLM and SGLang pages) on loopback, read by ScrapeSignals
  with bounded concurrency, twice (the second read has a window, so percentiles too). Target:
  within one pass interval (10 s by default).
objective: the real service in-process against the stand-ins with their model servers; one
  model with a 500 ms TTFT objective and a request target no load reaches. Each trial offers a
  load its replicas cannot hold (TTFT breaks), and measures until the Nomad stand-in accepted
  the next replica's job (its SubmitTime); then takes the load away and waits for the scale-down.
  Target p99 under 1 s.

    .venv/bin/python bench/signals.py --replicas 2000 --trials 20
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import time
from datetime import UTC, datetime
from typing import Any

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_server import ModelServers
from scheduler.adapters.kv_layout import KVLayout
from scheduler.demand.signals import ScrapeSignals, Target
from scheduler.service.config import ServiceConfig
from scheduler.service.logs import configure_logging
from scheduler.service.loop import Service

LAYOUT = KVLayout()
MODEL = "bench"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def _serve(replicas: int, models: int, conn: Any) -> None:
    """In a process of its own, as model servers are on other machines: start them, send the
    ports, wait for the word to stop."""
    servers = ModelServers()
    ports = []
    for i in range(replicas):
        ports.append(servers.start(f"a{i}", f"m{i % models}", "sglang" if i % 2 else "vllm"))
    for i in range(models):
        servers.offer(f"m{i}", 4.0 * replicas / models)
    conn.send(ports)
    conn.recv()
    servers.close()


def scrape(replicas: int, models: int, concurrency: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(replicas, models, theirs), daemon=True)
    proc.start()
    try:
        ports = mine.recv()
        targets: dict[str, list[Target]] = {}
        for i, port in enumerate(ports):
            name = f"m{i % models}"
            url = f"http://127.0.0.1:{port}"
            targets.setdefault(name, []).append(Target(name, f"r{i}", f"a{i}", url))
        source = ScrapeSignals(concurrency=concurrency, timeout_s=5.0)
        names = sorted(targets)
        times, errors, with_ttft = [], 0, 0
        for _ in range(3):
            sig = source.read_signals(names, targets, datetime.now(UTC))
            times.append(source.last_duration_s)
            errors = len(sig.errors)
            with_ttft = sum(1 for load in sig.load.values() if load.ttft_p90_ms is not None)
    finally:
        mine.send("stop")
        proc.join(10)
    return {
        "replicas": replicas,
        "models": models,
        "concurrency": concurrency,
        "scrape_s": [round(t, 3) for t in times],
        "errors_last": errors,
        "models_with_ttft_last": with_ttft,
        "pass_interval_s": ServiceConfig().pass_interval_s,
        "note": "model servers in a separate process; scraper and servers share this machine",
    }


def _jobs(dc: DevCluster) -> list[dict[str, Any]]:
    return [
        j
        for j in dc.nomad.jobs()
        if (j.get("Meta") or {}).get("llm_scheduler_model") == MODEL and not j.get("Stop")
    ]


def _wait(pred: Any, timeout: float = 30.0) -> None:
    start = time.perf_counter()
    while not pred():
        if time.perf_counter() - start > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.01)


def objective(trials: int, interval_s: float) -> dict[str, Any]:
    with DevCluster(load_delay_s=0.05, model_servers=True) as dc:
        assert dc.servers is not None
        settings = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0}
        dc.consul.kv_put(LAYOUT.settings, json.dumps({**settings, "scale_down_window_s": 0}))
        model = {
            "owner": "bench",
            "scaling": {"min": 1, "max": 2, "target_per_replica": 1000, "ttft_p90_ms": 500},
            "profiles": [{"name": "one", "gpus": 1}],
            "serve": {"source": "org/bench-model"},
        }
        dc.consul.kv_put(LAYOUT.model_key(MODEL), json.dumps(model))
        config = ServiceConfig(
            nomad_addr=dc.nomad_url,
            consul_addr=dc.consul_url,
            lock_delay_s=0,
            session_ttl_s=10,
            watch_wait_s=5,
            signals="scrape",
            signal_window_s=1.0,
            signal_interval_s=interval_s,
        )
        service = Service(config)
        service.run_in_thread()
        latencies: list[float] = []
        try:
            _wait(lambda: len(_jobs(dc)) == 1)
            for _ in range(trials):
                time.sleep(1.2)  # a window of good readings first
                broken_ns = time.time_ns()
                dc.servers.offer(MODEL, 24)  # 3x what one replica runs: TTFT ~4 s
                _wait(lambda: len(_jobs(dc)) == 2)
                newest = max(int(j.get("SubmitTime") or 0) for j in _jobs(dc))
                latencies.append((newest - broken_ns) / 1e9)
                dc.servers.offer(MODEL, 0)
                _wait(lambda: len(_jobs(dc)) == 1)
        finally:
            service.stop()
            service.join_watches(6)  # no blocking query cut off when the stand-ins stop
    return {
        "trials": trials,
        "signal_interval_s": interval_s,
        "broken_to_registered_p50_ms": _pct(latencies, 0.5),
        "broken_to_registered_p99_ms": _pct(latencies, 0.99),
        "broken_to_registered_max_ms": round(max(latencies) * 1000, 1),
        "target_p99_ms": 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=2000)
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.5, help="signal_interval_s")
    args = parser.parse_args()
    configure_logging("console", level=logging.ERROR)
    out = {
        "scrape": scrape(args.replicas, args.models, args.concurrency),
        "objective": objective(args.trials, args.interval),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
