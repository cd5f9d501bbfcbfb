"""Leader hand-off: takeover time after SIGTERM and after SIGKILL of the leading scheduler.

Two `llm-scheduler run` processes (leader and standby) on the stand-ins (their own process),
one model with two replicas. Each round signals the leader, times until the standby's
`/healthz` says it leads, and starts a new standby. SIGTERM should hand over at once (the
lock is released before the session is destroyed); SIGKILL within the session TTL x2 (when
Consul invalidates it) + the lock-delay. Every round checks: exactly the two replicas live
(none lost), and no job registered beyond them (no duplicate). Prints JSON.

    .venv/bin/python -m bench.leader_handoff --kills 20 --lock-delay 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import consul as py_consul
from bench.actuation_lag import _Cluster, _pct

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "llm-scheduler/"
MODEL = "handoff"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Scheduler:
    def __init__(self, cluster: _Cluster, ttl_s: int, lock_delay_s: int) -> None:
        self.port = _free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "CONSUL_HTTP_ADDR": cluster.consul_url,
            "NOMAD_ADDR": cluster.nomad_url,
            "LLM_SCHEDULER_LISTEN_ADDR": f"127.0.0.1:{self.port}",
            "LLM_SCHEDULER_LOCK_DELAY_S": str(lock_delay_s),
            "LLM_SCHEDULER_SESSION_TTL_S": str(ttl_s),
            "LLM_SCHEDULER_WATCH_WAIT_S": "5",
            "LLM_SCHEDULER_PASS_INTERVAL_S": "1",
        }
        env.pop("CONSUL_HTTP_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from scheduler.cli import main; main()", "run"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def health(self) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = httpx.get(
                f"http://127.0.0.1:{self.port}/healthz", timeout=2
            ).json()
            return body
        except (httpx.HTTPError, ValueError):
            return None

    def leads(self) -> bool:
        return bool((self.health() or {}).get("leader"))

    def wait_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while (self.health() or {}).get("passes", 0) < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("a scheduler did not come up")
            time.sleep(0.1)


def _jobs(cluster: _Cluster) -> tuple[int, int]:
    """(live jobs of the model, all jobs of the model ever listed)."""
    stubs = httpx.get(cluster.nomad_url + "/v1/jobs", params={"prefix": "llm-"}, timeout=30)
    ours = [s for s in stubs.json() if s["ID"].startswith(f"llm-{MODEL}-")]
    return sum(1 for s in ours if not s.get("Stop")), len(ours)


def run(kills: int, ttl_s: int, lock_delay_s: int) -> dict[str, Any]:
    cluster = _Cluster(64, 0.0)
    host, port = cluster.consul_url.removeprefix("http://").split(":")
    kv = py_consul.Consul(host=host, port=int(port)).kv
    kv.put(PREFIX + "settings", json.dumps({"eviction_grace_s": 0, "min_lifetime_s": 0,
                                            "preempt_hold_s": 0}))  # fmt: skip
    kv.put(PREFIX + "models/" + MODEL, json.dumps({
        "owner": "bench", "scaling": {"min": 0, "max": 2, "target_per_replica": 1},
        "profiles": [{"name": "one", "gpus": 1}]}))  # fmt: skip
    kv.put(PREFIX + "demand/" + MODEL, json.dumps({"inflight": 2}))
    a, b = _Scheduler(cluster, ttl_s, lock_delay_s), _Scheduler(cluster, ttl_s, lock_delay_s)
    results: dict[str, list[float]] = {"SIGTERM": [], "SIGKILL": []}
    problems: list[str] = []
    try:
        a.wait_up()
        b.wait_up()
        _wait_for_leader(cluster, a, b)
        baseline_total = _jobs(cluster)[1]
        for sig in [signal.SIGTERM] * kills + [signal.SIGKILL] * kills:
            leader, standby = (a, b) if a.leads() else (b, a)
            killed = time.monotonic()
            leader.proc.send_signal(sig)
            while not standby.leads():
                if time.monotonic() - killed > 2 * ttl_s + lock_delay_s + 30:
                    raise TimeoutError(f"no takeover after {sig.name}")
                time.sleep(0.05)
            results[sig.name].append(time.monotonic() - killed)
            leader.proc.wait(60)
            fresh = _Scheduler(cluster, ttl_s, lock_delay_s)
            fresh.wait_up()
            time.sleep(1.5)  # a pass or two of the new leader
            live, total = _jobs(cluster)
            if live != 2:
                problems.append(f"after {sig.name}: {live} live replicas, want 2")
            if total != baseline_total:
                problems.append(f"after {sig.name}: {total - baseline_total} extra jobs")
            a, b = standby, fresh
    finally:
        for s in (a, b):
            s.proc.send_signal(signal.SIGTERM)
        for s in (a, b):
            try:
                s.proc.wait(30)
            except subprocess.TimeoutExpired:
                s.proc.kill()
        cluster.registrations()
    return {
        "session_ttl_s": ttl_s,
        "lock_delay_s": lock_delay_s,
        "bound_sigkill_s": 2 * ttl_s + lock_delay_s,
        "takeover_after_sigterm": _stats(results["SIGTERM"]),
        "takeover_after_sigkill": _stats(results["SIGKILL"]),
        "duplicate_or_lost": problems,
    }


def _wait_for_leader(cluster: _Cluster, a: _Scheduler, b: _Scheduler) -> None:
    deadline = time.monotonic() + 60
    while _jobs(cluster)[0] != 2 or not (a.leads() or b.leads()):
        if time.monotonic() > deadline:
            raise TimeoutError("no leader with two replicas")
        time.sleep(0.2)


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {}
    return {
        "n": len(values),
        "p50_s": round(_pct(values, 0.5), 2),
        "max_s": round(max(values), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=20, help="rounds per signal")
    parser.add_argument("--ttl", type=int, default=10, help="session TTL (Consul minimum 10)")
    parser.add_argument("--lock-delay", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.kills, args.ttl, args.lock_delay), indent=2))


if __name__ == "__main__":
    main()
