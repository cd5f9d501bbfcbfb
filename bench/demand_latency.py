"""Demand-to-job latency: time from a demand write in Consul KV to the Nomad job being registered.

Runs the real service in-process against the stand-ins over HTTP. Demand for one model ramps
up by one replica per change (each change must register one new job), then back down (each
change must deregister one). Prints JSON with p50/p99 in milliseconds; target p99 <= 300 ms.

    .venv/bin/python bench/demand_latency.py --changes 200
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from typing import Any

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.adapters.kv_layout import KVLayout
from scheduler.service.config import ServiceConfig
from scheduler.service.logs import configure_logging
from scheduler.service.loop import Service

LAYOUT = KVLayout()
MODEL = "bench"


def _live_jobs(dc: DevCluster) -> int:
    return sum(
        1
        for j in dc.nomad.jobs()
        if (j.get("Meta") or {}).get("llm_scheduler_model") == MODEL and not j.get("Stop")
    )


def _wait_count(dc: DevCluster, want: int, timeout: float = 10.0) -> None:
    # Polled coarsely: the stand-in runs in this process and polling steals its CPU.
    start = time.perf_counter()
    while _live_jobs(dc) != want:
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{want} jobs not reached in {timeout}s")
        time.sleep(0.01)


def _newest_submit_ns(dc: DevCluster) -> int:
    """When the stand-in accepted the newest job: its SubmitTime, stamped at registration."""
    return max(
        int(j.get("SubmitTime") or 0)
        for j in dc.nomad.jobs()
        if (j.get("Meta") or {}).get("llm_scheduler_model") == MODEL
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run(changes: int, debounce_s: float, top: int) -> dict[str, Any]:
    with DevCluster(load_delay_s=0.05) as dc:
        dc.consul.kv_put(
            LAYOUT.settings,
            json.dumps({"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0}),
        )
        model = {
            "owner": "bench",
            "scaling": {"min": 0, "max": top, "target_per_replica": 1},
            "profiles": [{"name": "one", "gpus": 1}],
            "serve": {"source": "org/bench-model"},
        }
        dc.consul.kv_put(LAYOUT.model_key(MODEL), json.dumps(model))
        config = ServiceConfig(
            nomad_addr=dc.nomad_url,
            consul_addr=dc.consul_url,
            debounce_s=debounce_s,
            lock_delay_s=0,
            session_ttl_s=10,
            watch_wait_s=5,
        )
        service = Service(config)
        service.run_in_thread()
        while not service.leader.is_leader:
            time.sleep(0.01)
        up: list[float] = []
        down: list[float] = []
        level, step = 0, 1
        for _ in range(changes):
            if level + step > top or level + step < 0:
                step = -step
            level += step
            written_ns, written = time.time_ns(), time.perf_counter()
            dc.consul.kv_put(LAYOUT.demand_key(MODEL), json.dumps({"inflight": level}))
            _wait_count(dc, level)
            if step > 0:
                up.append((_newest_submit_ns(dc) - written_ns) / 1e9)
            else:
                down.append(time.perf_counter() - written)  # polled: up to 10 ms late
        service.stop()
    return {
        "changes": changes,
        "debounce_ms": debounce_s * 1000,
        "register_p50_ms": round(_pct(up, 0.5), 1),
        "register_p99_ms": round(_pct(up, 0.99), 1),
        "register_max_ms": round(max(up) * 1000, 1),
        "deregister_p50_ms": round(_pct(down, 0.5), 1) if down else None,
        "deregister_p99_ms": round(_pct(down, 0.99), 1) if down else None,
        "p50_ms": round(statistics.median(up + down) * 1000, 1),
        "p99_ms": round(_pct(up + down, 0.99), 1),
        "target_p99_ms": 300,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--debounce", type=float, default=0.1)
    parser.add_argument("--top", type=int, default=24, help="highest replica count of the ramp")
    args = parser.parse_args()
    configure_logging("console", level=logging.ERROR)
    print(json.dumps(run(args.changes, args.debounce, args.top), indent=2))


if __name__ == "__main__":
    main()
