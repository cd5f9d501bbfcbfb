"""Health and catalog endpoints fed through ServiceRegistry, from another thread, with blocking."""

from __future__ import annotations

import threading
import time

import consul
from llm_scheduler_standins.consul import ConsulStandin
from llm_scheduler_standins.registry import ServiceInstance


def instance(service_id: str, port: int, status: str = "passing") -> ServiceInstance:
    return ServiceInstance(
        id=service_id,
        name="vllm-qwen",
        node_id="node-uuid-1",
        node_name="gpu-1",
        address="10.0.0.5",
        port=port,
        tags=("model=qwen",),
        meta={"model": "qwen"},
        check_status=status,  # type: ignore[arg-type]
    )


def test_registered_service_is_visible_and_filterable(
    standin: ConsulStandin, client: consul.Consul
) -> None:
    standin.register_service(instance("a", 8000))
    standin.register_service(instance("b", 8001, "critical"))
    _, entries = client.health.service("vllm-qwen")
    assert {e["Service"]["ID"] for e in entries} == {"a", "b"}
    _, passing = client.health.service("vllm-qwen", passing=True)
    assert [e["Service"]["Port"] for e in passing] == [8000]
    assert passing[0]["Node"]["Node"] == "gpu-1"
    assert passing[0]["Service"]["Meta"] == {"model": "qwen"}
    _, catalog = client.catalog.service("vllm-qwen")
    assert sorted(e["ServicePort"] for e in catalog) == [8000, 8001]
    _, services = client.catalog.services()
    assert services["vllm-qwen"] == ["model=qwen"]
    standin.set_check_status("b", "passing")
    assert len(client.health.service("vllm-qwen", passing=True)[1]) == 2
    standin.deregister_service("a")
    standin.deregister_service("a")  # idempotent
    assert [e["Service"]["ID"] for e in client.health.service("vllm-qwen")[1]] == ["b"]


def test_health_watch_wakes_on_registration_from_another_thread(
    standin: ConsulStandin, client: consul.Consul
) -> None:
    index, entries = client.health.service("vllm-qwen", passing=True)
    assert entries == []
    threading.Timer(0.1, lambda: standin.register_service(instance("c", 9000))).start()
    started = time.monotonic()
    new_index, entries = client.health.service("vllm-qwen", index=index, wait="5s", passing=True)
    assert time.monotonic() - started < 2
    assert int(new_index) > int(index)
    assert [e["Service"]["ID"] for e in entries] == ["c"]


def test_status_leader_and_agent_self(client: consul.Consul) -> None:
    assert client.status.leader() == "127.0.0.1:8300"
    assert client.agent.self()["Config"]["Datacenter"] == "dc1"


def test_critical_service_check_invalidates_a_bound_session(
    standin: ConsulStandin, client: consul.Consul
) -> None:
    standin.register_service(instance("bound", 8100))
    sid = client.session.create(checks=["service:bound"], lock_delay=0)
    client.kv.put("bound-lock", "v", acquire=sid)
    standin.set_check_status("bound", "critical")
    assert client.session.info(sid)[1] is None
    assert "Session" not in client.kv.get("bound-lock")[1]


def test_health_state_lists_checks_by_state_and_blocks(
    standin: ConsulStandin, client: consul.Consul
) -> None:
    # The service's health watch reads /v1/health/state/any; it must carry X-Consul-Index.
    index, checks = client.health.state("any")
    assert checks == [] and int(index) >= 1
    standin.register_service(instance("a", 8000))
    standin.register_service(instance("b", 8001, "critical"))
    _, checks = client.health.state("any")
    assert sorted(c["CheckID"] for c in checks) == ["serfHealth", "service:a", "service:b"]
    _, critical = client.health.state("critical")
    assert [c["ServiceID"] for c in critical] == ["b"]
    index, _ = client.health.state("any")
    threading.Timer(0.1, lambda: standin.set_check_status("b", "passing")).start()
    new_index, _ = client.health.state("any", index=index, wait="5s")
    assert int(new_index) > int(index)
    assert client.health.state("critical")[1] == []
