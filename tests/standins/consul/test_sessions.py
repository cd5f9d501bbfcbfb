"""Sessions and locks through py-consul: acquire/release, destroy, TTL, lock-delay, errors."""

from __future__ import annotations

import time

import httpx
import pytest

import consul
from llm_scheduler_standins.consul import ConsulStandin


def test_acquire_release_and_lock_index(client: consul.Consul) -> None:
    sid = client.session.create(name="leader", lock_delay=0)
    other = client.session.create(name="other", lock_delay=0)
    assert client.kv.put("service/p/leader", "me", acquire=sid) is True
    _, entry = client.kv.get("service/p/leader")
    assert entry["Session"] == sid
    assert entry["LockIndex"] == 1
    assert client.kv.put("service/p/leader", "you", acquire=other) is False
    assert client.kv.put("service/p/leader", "me2", acquire=sid) is True  # re-acquire by holder
    assert client.kv.get("service/p/leader")[1]["LockIndex"] == 1
    assert client.kv.put("service/p/leader", "x", release=other) is False
    assert client.kv.put("service/p/leader", "bye", release=sid) is True
    _, entry = client.kv.get("service/p/leader")
    assert "Session" not in entry
    assert entry["Value"] == b"bye"  # release writes the body
    assert client.kv.put("service/p/leader", "you", acquire=other) is True
    assert client.kv.get("service/p/leader")[1]["LockIndex"] == 2


def test_acquire_with_unknown_session_is_500(http: httpx.Client) -> None:
    response = http.put("/v1/kv/k?acquire=no-such-session", content=b"")
    assert response.status_code == 500
    assert response.text == 'invalid session "no-such-session"'


def test_destroy_releases_the_lock_and_arms_lock_delay(client: consul.Consul) -> None:
    sid = client.session.create(name="holder", lock_delay=1)
    contender = client.session.create(name="contender", lock_delay=0)
    client.kv.put("lock", "v", acquire=sid)
    before = client.kv.get("lock")[1]["ModifyIndex"]
    assert client.session.destroy(sid) is True
    _, entry = client.kv.get("lock")
    assert "Session" not in entry
    assert entry["ModifyIndex"] > before
    assert entry["Value"] == b"v"
    assert client.kv.put("lock", "c", acquire=contender) is False  # inside the 1 s lock-delay
    time.sleep(1.1)
    assert client.kv.put("lock", "c", acquire=contender) is True
    assert client.session.destroy(sid) is True  # idempotent


def test_behavior_delete_removes_held_keys(client: consul.Consul) -> None:
    sid = client.session.create(behavior="delete", lock_delay=0)
    client.kv.put("ephemeral", "v", acquire=sid)
    client.session.destroy(sid)
    assert client.kv.get("ephemeral")[1] is None


def test_ttl_expiry_invalidates_the_session() -> None:
    from llm_scheduler_standins.consul import ConsulStandin

    # A multiplier of 0.03 turns the 10 s minimum TTL into 0.3 s.
    standin = ConsulStandin(jitter=False, session_ttl_multiplier=0.03)
    server = standin.start()
    try:
        c = consul.Consul(host=server.host, port=server.port)
        sid = c.session.create(ttl=10, lock_delay=0)
        renewed = c.session.create(ttl=10, lock_delay=0)
        c.kv.put("ttl-lock", "v", acquire=sid)
        index, _ = c.kv.get("ttl-lock")
        for _ in range(4):
            time.sleep(0.1)
            c.session.renew(renewed)
        # The blocking watch wakes when expiry releases the lock.
        _, entry = c.kv.get("ttl-lock", index=index, wait="5s")
        assert "Session" not in entry
        assert c.session.info(sid)[1] is None
        assert c.session.info(renewed)[1] is not None
        with pytest.raises(consul.NotFound):
            c.session.renew(sid)
    finally:
        standin.close()


def test_session_create_decodes_py_consul_body_and_defaults(client: consul.Consul) -> None:
    sid = client.session.create(name="n", ttl=15, behavior="delete", lock_delay=5, checks=[])
    _, info = client.session.info(sid)
    assert info["TTL"] == "15s"
    assert info["Behavior"] == "delete"
    assert info["LockDelay"] == 5_000_000_000  # "5s"; and a bare 5 would be seconds too
    assert info["NodeChecks"] == []  # an explicit empty checks list drops serfHealth
    default = client.session.create()
    _, info = client.session.info(default)
    assert info["LockDelay"] == 15_000_000_000
    assert info["NodeChecks"] == ["serfHealth"]
    assert info["TTL"] == ""
    assert info["Node"] == "consul-standin"


def test_session_errors_are_plain_text(http: httpx.Client) -> None:
    too_short = http.put("/v1/session/create", json={"TTL": "5s"})
    assert (too_short.status_code, too_short.text) == (
        500,
        "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]",
    )
    assert http.put("/v1/session/create", json={"TTL": "86401s"}).status_code == 500
    assert http.put("/v1/session/create", json={"TTL": "86400s"}).status_code == 200
    behavior = http.put("/v1/session/create", json={"Behavior": "explode"})
    assert (behavior.status_code, behavior.text) == (500, "Invalid Behavior setting 'explode'")
    bad = http.put("/v1/session/create", content=b"{nope")
    assert bad.status_code == 400
    assert bad.text.startswith("Request decode failed: ")
    renew = http.put("/v1/session/renew/abc")
    assert (renew.status_code, renew.text) == (404, "Session id 'abc' not found")
    assert http.get("/v1/session/info/abc").json() == []
    numeric = http.put("/v1/session/create", json={"lockdelay": 7}).json()["ID"]
    assert http.get(f"/v1/session/info/{numeric}").json()[0]["LockDelay"] == 7_000_000_000


def test_session_list_and_node_and_blocking(
    client: consul.Consul, http: httpx.Client, standin: ConsulStandin
) -> None:
    index, sessions = client.session.list()
    assert sessions == []
    standin.register_node("node-a")
    sid = client.session.create(node="node-a")
    _, sessions = client.session.list(index=index, wait="2s")
    assert [s["ID"] for s in sessions] == [sid]
    assert [s["ID"] for s in client.session.node("node-a")[1]] == [sid]
    assert client.session.node("node-b")[1] == []
