"""ACL mode: token transports, exact 403 texts, recurse/keys filtering, txn and session checks."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import consul
from llm_scheduler_standins.consul import ConsulACL, ConsulStandin, TokenSpec
from llm_scheduler_standins.runner import RunningServer

TENANT = TokenSpec(
    accessor_id="aaaa-tenant",
    key_prefix_rules={"quota/t1/": "read", "demand/": "write", "demand/secret/": "deny"},
)
ADMIN = TokenSpec(accessor_id="aaaa-admin", key_prefix_rules={"": "write"}, session_write=True)


@pytest.fixture
def acl_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningServer]:
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    standin = ConsulStandin(
        acl=ConsulACL(tokens={"tenant-secret": TENANT, "admin-secret": ADMIN}), jitter=False
    )
    for key in ("quota/t1/gpu", "quota/t2/gpu", "demand/m1", "demand/secret/x"):
        standin.kv_put(key, "1")
    server = standin.start()
    yield server
    standin.close()


def test_403_texts(acl_server: RunningServer) -> None:
    with httpx.Client(base_url=acl_server.url) as http:
        denied = http.get("/v1/kv/quota/t2/gpu", headers={"X-Consul-Token": "tenant-secret"})
        assert denied.status_code == 403
        assert denied.headers["content-type"].startswith("text/plain")
        assert denied.text == (
            "Permission denied: token with AccessorID 'aaaa-tenant' lacks permission "
            "'key:read' on \"quota/t2/gpu\""
        )
        anonymous = http.get("/v1/kv/foo")
        assert anonymous.text == (
            "Permission denied: anonymous token lacks permission 'key:read' on \"foo\". "
            "The anonymous token is used implicitly when a request does not specify a token."
        )
        # A single GET is denied even when the key does not exist (no existence leak).
        assert http.get("/v1/kv/nope?token=tenant-secret").status_code == 403
        unknown = http.get("/v1/kv/demand/m1", headers={"Authorization": "Bearer wrong"})
        assert (unknown.status_code, unknown.text) == (403, "ACL not found")
        write = http.put("/v1/kv/quota/t1/gpu?token=tenant-secret", content=b"9")
        assert "lacks permission 'key:write' on \"quota/t1/gpu\"" in write.text
        assert http.get("/v1/kv/quota/t1/gpu?token=tenant-secret").status_code == 200
        assert (
            http.get(
                "/v1/kv/demand/m1", headers={"Authorization": "Bearer tenant-secret"}
            ).status_code
            == 200
        )


def test_py_consul_raises_acl_permission_denied(acl_server: RunningServer) -> None:
    c = consul.Consul(host=acl_server.host, port=acl_server.port, token="tenant-secret")
    assert c.kv.put("demand/m2", "2") is True
    with pytest.raises(consul.ACLPermissionDenied, match="key:write"):
        c.kv.put("quota/t1/gpu", "2")
    with pytest.raises(consul.ACLPermissionDenied, match="session:write"):
        c.session.create()


def test_recurse_and_keys_are_filtered(acl_server: RunningServer) -> None:
    with httpx.Client(base_url=acl_server.url) as http:
        response = http.get("/v1/kv/?recurse", headers={"X-Consul-Token": "tenant-secret"})
        assert [e["Key"] for e in response.json()] == ["demand/m1", "quota/t1/gpu"]
        assert response.headers["X-Consul-Results-Filtered-By-ACLs"] == "true"
        assert response.headers["X-Consul-Default-ACL-Policy"] == "deny"
        keys = http.get("/v1/kv/quota/?keys", headers={"X-Consul-Token": "tenant-secret"})
        assert keys.json() == ["quota/t1/gpu"]
        admin = http.get("/v1/kv/?recurse", headers={"X-Consul-Token": "admin-secret"})
        assert len(admin.json()) == 4
        assert "X-Consul-Results-Filtered-By-ACLs" not in admin.headers
        # Anonymous sees nothing: 404, and no filtered header for the anonymous token.
        anonymous = http.get("/v1/kv/?recurse")
        assert anonymous.status_code == 404
        assert "X-Consul-Results-Filtered-By-ACLs" not in anonymous.headers
        # Recursive delete needs write on everything beneath the prefix.
        tree = http.delete("/v1/kv/demand/?recurse", headers={"X-Consul-Token": "tenant-secret"})
        assert tree.status_code == 403


def test_txn_acl_failures_are_409_permission_denied(acl_server: RunningServer) -> None:
    with httpx.Client(base_url=acl_server.url) as http:
        response = http.put(
            "/v1/txn",
            headers={"X-Consul-Token": "tenant-secret"},
            json=[
                {"KV": {"Verb": "set", "Key": "demand/m3", "Value": "MQ=="}},
                {"KV": {"Verb": "set", "Key": "quota/t1/gpu", "Value": "MQ=="}},
            ],
        )
        assert response.status_code == 409
        assert response.json()["Errors"] == [{"OpIndex": 1, "What": "Permission denied"}]
        reads = http.put(
            "/v1/txn",
            headers={"X-Consul-Token": "tenant-secret"},
            json=[{"KV": {"Verb": "get-tree", "Key": "quota/"}}],
        )
        assert [r["KV"]["Key"] for r in reads.json()["Results"]] == ["quota/t1/gpu"]
