from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """One stand-in Consul + Nomad pair for the module (fast: starting one costs ~0.2 s)."""
    from llm_scheduler_standins.devcluster import DevCluster

    with DevCluster(load_delay_s=0.05) as dev:
        yield dev


@pytest.fixture
def cluster_env(cluster: object, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", cluster.consul_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("NOMAD_ADDR", cluster.nomad_url)  # type: ignore[attr-defined]
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("NOMAD_TOKEN", raising=False)
    return cluster


@pytest.fixture
def consul_kv(cluster_env: object) -> object:
    """A py-consul client of the stand-in, as an operator's tools would have."""
    from scheduler.ops.connect import consul_client

    return consul_client(cluster_env.consul_url)  # type: ignore[attr-defined]
