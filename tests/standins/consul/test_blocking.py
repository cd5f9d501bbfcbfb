"""Blocking queries: wake-up latency, timeouts, missing-key and delete watches, index reset."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import consul
from llm_scheduler_standins.consul import ConsulStandin
from llm_scheduler_standins.faults import Faults
from llm_scheduler_standins.runner import RunningServer

WAKE_LIMIT_S = 0.5  # the requirement is 100 ms; the margin keeps a loaded CI box honest


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        box["result"] = call()
        box["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_blocking_read_returns_soon_after_a_put(client: consul.Consul) -> None:
    client.kv.put("demand/m1", "1")
    index, _ = client.kv.get("demand/", recurse=True)
    latencies = []
    for round_number in range(5):
        thread, box = in_background(
            lambda i=index: client.kv.get("demand/", recurse=True, index=i, wait="10s")
        )
        time.sleep(0.15)  # let the watcher block first
        assert thread.is_alive(), "blocking read returned before any change"
        put_at = time.monotonic()
        client.kv.put("demand/m1", str(round_number + 2))
        thread.join(5)
        latencies.append(box["done_at"] - put_at)
        index, entries = box["result"]
        assert entries[0]["Value"] == str(round_number + 2).encode()
    assert max(latencies) < WAKE_LIMIT_S, f"woke after {max(latencies) * 1000:.1f} ms"


def test_blocking_read_times_out_with_the_same_index(client: consul.Consul) -> None:
    client.kv.put("k", "v")
    index, _ = client.kv.get("k")
    started = time.monotonic()
    new_index, entry = client.kv.get("k", index=index, wait="300ms")
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2
    assert new_index == index
    assert entry["Value"] == b"v"


def test_unrelated_write_does_not_wake_a_prefix_watch(client: consul.Consul) -> None:
    client.kv.put("a/x", "1")
    index, _ = client.kv.get("a/", recurse=True)
    thread, box = in_background(
        lambda: client.kv.get("a/", recurse=True, index=index, wait="400ms")
    )
    time.sleep(0.1)
    client.kv.put("b/x", "1")
    thread.join(3)
    assert box["result"][0] == index  # woke only at timeout, nothing changed under a/


def test_missing_key_watch_wakes_on_creation(client: consul.Consul) -> None:
    index, entry = client.kv.get("service/x/leader")
    assert entry is None
    thread, box = in_background(lambda: client.kv.get("service/x/leader", index=index, wait="5s"))
    time.sleep(0.1)
    client.kv.put("other", "1")  # raises the table index, but the watched key is still missing
    time.sleep(0.15)
    assert thread.is_alive()
    client.kv.put("service/x/leader", "me")
    thread.join(3)
    assert box["result"][1]["Value"] == b"me"


def test_delete_wakes_single_and_recursive_watches(client: consul.Consul) -> None:
    client.kv.put("w/a", "1")
    single_index, _ = client.kv.get("w/a")
    prefix_index, _ = client.kv.get("w/", recurse=True)
    t1, single = in_background(lambda: client.kv.get("w/a", index=single_index, wait="5s"))
    t2, prefix = in_background(
        lambda: client.kv.get("w/", recurse=True, index=prefix_index, wait="5s")
    )
    time.sleep(0.15)
    deleted_at = time.monotonic()
    client.kv.delete("w/a")
    t1.join(3)
    t2.join(3)
    assert single["result"][1] is None
    assert prefix["result"][1] is None
    assert int(prefix["result"][0]) > int(prefix_index)
    assert max(single["done_at"], prefix["done_at"]) - deleted_at < WAKE_LIMIT_S


def test_index_zero_or_absent_does_not_block(http: httpx.Client) -> None:
    started = time.monotonic()
    assert http.get("/v1/kv/none?index=0&wait=5s").status_code == 404
    assert time.monotonic() - started < 1


def test_wait_is_capped_by_max_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    standin = ConsulStandin(max_wait_s=0.3, jitter=False)
    server = standin.start()
    try:
        with httpx.Client(base_url=server.url, timeout=5) as http:
            started = time.monotonic()
            http.get("/v1/kv/none?index=1&wait=10m")
            assert time.monotonic() - started < 2
    finally:
        standin.close()


def test_write_from_another_thread_wakes_the_server_loop(
    standin: ConsulStandin, server: RunningServer
) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        index = http.get("/v1/kv/x/?recurse").headers["X-Consul-Index"]
        thread, box = in_background(lambda: http.get(f"/v1/kv/x/?recurse&index={index}&wait=5s"))
        time.sleep(0.1)
        put_at = time.monotonic()
        standin.kv_put("x/y", "direct")  # test thread, not the server's event loop
        thread.join(3)
        assert box["result"].status_code == 200
        assert box["done_at"] - put_at < WAKE_LIMIT_S


def test_index_reset_lowers_the_index_and_releases_watchers() -> None:
    faults = Faults(seed=1)
    standin = ConsulStandin(faults=faults, jitter=False)
    server = standin.start()
    try:
        c = consul.Consul(host=server.host, port=server.port)
        for n in range(20):
            c.kv.put(f"r/{n % 3}", str(n))
        index, _ = c.kv.get("r/", recurse=True)
        thread, box = in_background(lambda: c.kv.get("r/", recurse=True, index=index, wait="10s"))
        time.sleep(0.1)
        faults.reset_index()
        thread.join(3)
        assert not thread.is_alive()
        new_index, entries = box["result"]
        assert int(new_index) < int(index)
        assert int(new_index) >= 1
        assert {e["Value"] for e in entries} == {b"17", b"18", b"19"}
        # Writes continue from the lower counter, as after a snapshot restore.
        c.kv.put("r/0", "after")
        assert int(c.kv.get("r/0")[0]) < int(index)
    finally:
        standin.close()
