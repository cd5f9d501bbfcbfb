"""Fixtures: a Consul stand-in on 127.0.0.1 (port 0) and py-consul / httpx clients for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import consul
from llm_scheduler_standins.consul import ConsulStandin
from llm_scheduler_standins.runner import RunningServer


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[ConsulStandin]:
    # py-consul lets CONSUL_HTTP_TOKEN override the token argument; keep tests independent of it.
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("CONSUL_HTTP_ADDR", raising=False)
    instance = ConsulStandin(jitter=False, session_ttl_multiplier=1.0)
    # The session docs' example names node "foobar"; Consul wants it in the catalog.
    instance.register_node("foobar")
    yield instance
    instance.close()


@pytest.fixture
def server(standin: ConsulStandin) -> RunningServer:
    return standin.start()


@pytest.fixture
def client(server: RunningServer) -> consul.Consul:
    return consul.Consul(host=server.host, port=server.port)


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c
