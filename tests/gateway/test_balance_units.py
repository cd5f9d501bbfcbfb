"""Two random choices, least load: open requests, the replica's own queue, a full KV cache;
Consul's health entries read as Consul's agent fills them in."""

from __future__ import annotations

import asyncio

from scheduler.gateway.replicas import ModelReplicas, Replica, parse_entries


def _table(*replicas: Replica) -> ModelReplicas:
    async def make() -> ModelReplicas:  # asyncio.Event wants a running loop on 3.11
        return ModelReplicas(replicas={r.id: r for r in replicas})

    return asyncio.run(make())


def test_the_less_loaded_of_two_wins_by_open_requests_queue_and_kv_cache() -> None:
    for busy in (
        Replica("b", "http://b", True, outstanding=3),
        Replica("b", "http://b", True, waiting=2.0),
        Replica("b", "http://b", True, kv_cache=0.99),
    ):
        idle = Replica("a", "http://a", True, outstanding=1)
        table = _table(idle, busy)
        assert {table.pick().id for _ in range(50)} == {"a"}


def test_only_usable_replicas_are_picked_and_a_probe_makes_one_usable() -> None:
    starting = Replica("s", "http://s", passing=False)
    table = _table(starting)
    assert table.pick() is None
    starting.probed_ok = True
    assert table.pick() is starting
    assert table.pick(exclude={"s"}) is None


def test_health_entries_address_port_and_checks() -> None:
    entries = [
        {"Node": {"Address": "10.0.0.1"}, "Service": {"ID": "a", "Address": "", "Port": 8000},
         "Checks": [{"Status": "passing"}, {"Status": "passing"}]},
        {"Node": {"Address": "10.0.0.2"}, "Service": {"ID": "b", "Address": "127.0.0.1",
         "Port": 9000}, "Checks": [{"Status": "passing"}, {"Status": "critical"}]},
        {"Node": {}, "Service": {"ID": "c", "Address": "::1", "Port": 1}, "Checks": []},
        {"Service": {"ID": "d", "Address": "x", "Port": "80"}},
        "garbage",
    ]  # fmt: skip
    assert parse_entries(entries) == {
        "a": ("http://10.0.0.1:8000", True),
        "b": ("http://127.0.0.1:9000", False),
        "c": ("http://[::1]:1", True),
    }
