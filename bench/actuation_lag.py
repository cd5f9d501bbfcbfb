"""Actuation lag under churn: demand write to Nomad job registered, 500 models, a slow Nomad.

Three processes, as on a real cluster: the Consul and Nomad stand-ins, the scheduler
(`llm-scheduler run`), and this driver. Every model runs one replica (demand 1, target 1);
then demand changes at a fixed rate, each change flipping one model between 1 and 2
replicas in a shuffled round. The lag of an up change is the time from its KV write to the
registration of that model's new job in the Nomad stand-in (a probe on the stand-in's
register records it). Nomad's job API (`/v1/job*`) answers after `--nomad-latency` seconds,
as a busy Nomad would. Prints JSON; target p95 < 2 s at 5 changes/s.

    .venv/bin/python -m bench.actuation_lag --rates 5,50 --seconds 30
    .venv/bin/python -m bench.actuation_lag --source /tmp/old   # another checkout's scheduler
    .venv/bin/python -m bench.actuation_lag --source /tmp/old --standins /tmp/old  # all of it
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

import consul as py_consul

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "llm-scheduler/"
H100 = "NVIDIA H100 80GB HBM3"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------- stand-in process


def serve_standins(n_gpus: int, latency_s: float, out: str) -> None:
    """The stand-ins with a slow job API and a registration probe; dumps the probe on SIGTERM."""
    from llm_scheduler_standins.devcluster import DevCluster
    from llm_scheduler_standins.faults import Faults
    from scheduler.core.models import GPU, Node

    nodes = []
    for i in range((n_gpus + 7) // 8):
        gpus = [GPU(id=f"GPU-{i}-{g}", model=H100, memory_gb=80) for g in range(8)]
        nodes.append(
            Node(id=f"node-{i:04d}", name=f"n{i}", cpu_cores=256, memory_gb=4096, gpus=gpus)
        )
    faults = Faults(seed=1)
    times: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    with DevCluster(fleet=nodes, load_delay_s=0.05, faults=faults) as dc:
        cluster = dc.nomad.cluster
        original = cluster.register

        def register(raw_job: Any, **kwargs: Any) -> dict[str, Any]:
            result: dict[str, Any] = original(raw_job, **kwargs)
            model = ((raw_job or {}).get("Meta") or {}).get("llm_scheduler_model")
            if model:
                with lock:
                    times[model].append(time.time_ns())
            return result

        cluster.register = register  # type: ignore[method-assign]
        faults.set("/v1/job", latency_s=latency_s)  # /v1/jobs, /v1/job/<id>, /v1/jobs/parse
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        print(f"consul {dc.consul_url}", flush=True)
        print(f"nomad {dc.nomad_url}", flush=True)
        while not done.wait(0.2):
            pass
        with lock:
            Path(out).write_text(json.dumps(times))


# ---------------------------------------------------------------- driver


class _Cluster:
    def __init__(self, n_gpus: int, latency_s: float, source: Path) -> None:
        self.probe = tempfile.mktemp(suffix=".json")
        env = {**os.environ, "PYTHONPATH": str(source)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.actuation_lag", "--serve", str(n_gpus), str(latency_s),
             self.probe],
            cwd=source, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        urls = dict(self.proc.stdout.readline().split() for _ in range(2))
        self.consul_url, self.nomad_url = urls["consul"], urls["nomad"]

    def registrations(self) -> dict[str, list[int]]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        data: dict[str, list[int]] = json.loads(Path(self.probe).read_text())
        os.unlink(self.probe)
        return data


def _scheduler(cluster: _Cluster, source: Path, workers: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "CONSUL_HTTP_ADDR": cluster.consul_url,
        "NOMAD_ADDR": cluster.nomad_url,
        "LLM_SCHEDULER_LISTEN_ADDR": "127.0.0.1:0",
        "LLM_SCHEDULER_LOCK_DELAY_S": "0",
        "LLM_SCHEDULER_SESSION_TTL_S": "10",
        "LLM_SCHEDULER_WATCH_WAIT_S": "5",
    }
    env.pop("CONSUL_HTTP_TOKEN", None)
    if workers >= 0:
        env["LLM_SCHEDULER_ACTUATION_WORKERS"] = str(workers)
    return subprocess.Popen(
        [sys.executable, "-c", "from scheduler.cli import main; main()", "run"],
        cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _count_jobs(nomad_url: str) -> int:
    stubs = httpx.get(nomad_url + "/v1/jobs", params={"prefix": "llm-"}, timeout=60).json()
    return sum(1 for s in stubs if not s.get("Stop"))


BENCH_MODEL = {
    "owner": "bench",
    "scaling": {"min": 0, "max": 2, "target_per_replica": 1},
    "profiles": [{"name": "one", "gpus": 1}],
    "serve": {"source": "org/bench-model"},
}


def run(
    n_models: int,
    rates: list[float],
    seconds: float,
    latency_s: float,
    workers: int,
    source: Path,
    standins: Path = ROOT,
) -> dict[str, Any]:
    cluster = _Cluster(n_models * 2 + 16, latency_s, standins)
    host, port = cluster.consul_url.removeprefix("http://").split(":")
    kv = py_consul.Consul(host=host, port=int(port)).kv
    # No scale-down window: a down change stops the replica, so that every up change needs a
    # new job (with the 300 s default a kept replica would answer the next up of its model,
    # and the lag would be measured to some later registration).
    kv.put(PREFIX + "settings", json.dumps({"eviction_grace_s": 0, "min_lifetime_s": 0,
                                            "preempt_hold_s": 0,
                                            "scale_down_window_s": 0}))  # fmt: skip
    models = [f"m{i:04d}" for i in range(n_models)]
    for name in models:
        kv.put(PREFIX + "models/" + name, json.dumps(BENCH_MODEL))
        kv.put(PREFIX + "demand/" + name, json.dumps({"inflight": 1}))
    scheduler = _scheduler(cluster, source, workers)
    results: list[dict[str, Any]] = []
    ups: list[tuple[float, str, int]] = []
    try:
        warm_up_s = _warm_up(cluster, n_models)
        level = {m: 1 for m in models}
        for rate in rates:
            results.append(_churn(kv, models, level, rate, seconds, ups))
    finally:
        scheduler.send_signal(signal.SIGTERM)
        try:
            scheduler.wait(60)
        except subprocess.TimeoutExpired:
            scheduler.kill()
        regs = cluster.registrations()
    for result in results:
        _lags(result, ups, regs)
    return {
        "source": str(source),
        "standins": str(standins),
        "models": n_models,
        "nomad_job_api_latency_s": latency_s,
        "actuation_workers": workers if workers >= 0 else "default",
        "seconds_per_rate": seconds,
        "warm_up_s": round(warm_up_s, 1),
        "rates": results,
        "target": "lag p95 < 2 s at 5 changes/s",
    }


def _warm_up(cluster: _Cluster, n_models: int) -> float:
    """Seconds until every model has its first job (then a little more to settle)."""
    started = time.perf_counter()
    while _count_jobs(cluster.nomad_url) < n_models:
        if time.perf_counter() - started > 900:
            raise TimeoutError(f"the first {n_models} jobs took more than 900 s")
        time.sleep(1)
    warm_up_s = time.perf_counter() - started
    time.sleep(3)
    return warm_up_s


def _churn(
    kv: Any,
    models: list[str],
    level: dict[str, int],
    rate: float,
    seconds: float,
    ups: list[tuple[float, str, int]],
) -> dict[str, Any]:
    """`rate` demand changes a second for `seconds`, each model's in turn (shuffled): up to 2
    and back to 1. Each up is recorded in `ups` with when it was written."""
    rng = random.Random(f"churn-{rate}")
    order: list[str] = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        if not order:
            order = list(models)
            rng.shuffle(order)
        name = order.pop()
        level[name] = 3 - level[name]
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        written = time.time_ns()
        kv.put(PREFIX + "demand/" + name, json.dumps({"inflight": level[name]}))
        if level[name] == 2:
            ups.append((rate, name, written))
    result = {"rate_per_s": rate, "writes_took_s": time.perf_counter() - start}
    time.sleep(min(60.0, seconds))  # let the tail land before the next rate
    for name in models:
        if level[name] != 1:
            level[name] = 1
            kv.put(PREFIX + "demand/" + name, json.dumps({"inflight": 1}))
    time.sleep(10)
    return result


def _lags(
    result: dict[str, Any], ups: list[tuple[float, str, int]], regs: dict[str, list[int]]
) -> None:
    """Each up of this rate to its model's next registration."""
    lags, missing = [], 0
    for rate, name, written in ups:
        if rate != result["rate_per_s"]:
            continue
        times = regs.get(name, [])
        i = bisect.bisect_left(times, written)
        if i < len(times):
            lags.append((times[i] - written) / 1e9)
        else:
            missing += 1
    result.update(
        writes_took_s=round(result["writes_took_s"], 2),
        ups=len(lags) + missing,
        ups_not_registered=missing,
        lag_p50_s=round(_pct(lags, 0.5), 3) if lags else None,
        lag_p95_s=round(_pct(lags, 0.95), 3) if lags else None,
        lag_max_s=round(max(lags), 3) if lags else None,
    )


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve_standins(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--rates", default="5,50", help="changes per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=30, help="churn time per rate")
    parser.add_argument("--nomad-latency", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=-1, help="-1: the service's default")
    parser.add_argument("--source", default=str(ROOT), help="checkout whose scheduler runs")
    parser.add_argument("--standins", default=str(ROOT), help="checkout whose stand-ins run")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = run(
        args.models,
        rates,
        args.seconds,
        args.nomad_latency,
        args.workers,
        Path(args.source),
        Path(args.standins),
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
