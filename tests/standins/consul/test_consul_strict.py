"""The Consul stand-in refuses what Consul refuses, through py-consul and httpx.

Read in hashicorp/consul: agent/consul/rpc.go forwardDC (ErrNoDCPath), agent/structs/errors.go,
agent/consul/state/session.go sessionCreateTxn (ErrMissingNode), agent/agent_endpoint.go
AgentSelf (Stats).
"""

from __future__ import annotations

import httpx
import pytest
from consul.exceptions import ConsulException

import consul
from llm_scheduler_standins.consul import ConsulStandin


def test_unknown_datacenter_has_no_path(client: consul.Consul, http: httpx.Client) -> None:
    """A server forwards `?dc=` elsewhere; with no route it answers ErrNoDCPath as a 500."""
    client.kv.put("k", "v")
    for path in ("/v1/kv/k", "/v1/session/list", "/v1/health/service/web", "/v1/catalog/services"):
        answer = http.get(path, params={"dc": "dc9"})
        assert (answer.status_code, answer.text) == (500, "No path to datacenter"), path
    refused = http.put("/v1/kv/k", params={"dc": "dc9"}, content=b"other")
    assert refused.status_code == 500
    assert client.kv.get("k")[1]["Value"] == b"v"  # nothing written
    assert http.get("/v1/kv/k", params={"dc": "dc1"}).status_code == 200
    with pytest.raises(ConsulException, match="No path to datacenter"):
        client.kv.get("k", dc="dc2")
    # The agent's own endpoints are local and ignore dc.
    assert http.get("/v1/agent/self", params={"dc": "dc9"}).status_code == 200


def test_session_for_an_unregistered_node_is_refused(
    client: consul.Consul, standin: ConsulStandin
) -> None:
    """sessionCreateTxn looks the node up in the catalog: ErrMissingNode, "Missing node
    registration", 500. Without `Node` the agent's own (registered) node is used
    (agent/session_endpoint.go), which is what the scheduler's leader lock does."""
    with pytest.raises(ConsulException, match="Missing node registration"):
        client.session.create(node="nowhere", lock_delay=0)
    assert client.session.list()[1] == []
    sid = client.session.create(name="llm-scheduler", checks=[], ttl=15, lock_delay=0)
    assert client.session.info(sid)[1]["Node"] == standin.store.agent_node
    standin.register_node("nowhere")
    assert client.session.create(node="nowhere", lock_delay=0)


def test_agent_self_reports_stats(client: consul.Consul) -> None:
    """AgentSelf returns `Stats` from agent.Stats(): sections of string values."""
    stats = client.agent.self()["Stats"]
    assert {"agent", "build", "consul", "raft", "runtime"} <= set(stats)
    assert stats["consul"]["server"] == "true" and stats["consul"]["leader"] == "true"
    assert stats["build"]["version"]
    assert all(isinstance(v, str) for section in stats.values() for v in section.values())
