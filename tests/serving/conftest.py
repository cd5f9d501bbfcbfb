"""Fixtures for the serving tests: a stand-in cluster and an operator's Consul client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from llm_scheduler_standins.devcluster import DevCluster

    with DevCluster(load_delay_s=0.05) as dev:
        yield dev


@pytest.fixture
def consul_kv(cluster: object, monkeypatch: pytest.MonkeyPatch) -> object:
    from scheduler.ops.connect import consul_client

    monkeypatch.setenv("CONSUL_HTTP_ADDR", cluster.consul_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("NOMAD_ADDR", cluster.nomad_url)  # type: ignore[attr-defined]
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    return consul_client(cluster.consul_url)  # type: ignore[attr-defined]
