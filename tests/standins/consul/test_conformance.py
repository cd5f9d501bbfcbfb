"""Every fixture in shared/fixtures/consul: documented requests accepted, answers of its shape."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from consul_fixtures import FIXTURES, fixture

from llm_scheduler_standins.conformance import ShapeMismatch, assert_same_shape, shape_mismatches
from llm_scheduler_standins.consul import ConsulStandin

NON_JSON = {"BEHAVIOUR.md", "NOTES.md", "SOURCES.md"}


def leader_session(http: httpx.Client) -> str:
    body = fixture("leader-election-session-create-request.json")
    response = http.put("/v1/session/create", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["ID"])


def check_kv_read(http: httpx.Client) -> list[tuple[Any, str]]:
    session = http.put("/v1/session/create", json=fixture("session-create-request.json")).json()[
        "ID"
    ]
    assert http.put(f"/v1/kv/zip?acquire={session}&flags=0", content=b"test").json() is True
    single = http.get("/v1/kv/zip")
    return [(single.json(), "kv-read-response.json")]


def check_kv_keys(http: httpx.Client) -> list[tuple[Any, str]]:
    for key in ("web/bar", "web/foo", "web/subdir/a"):
        http.put(f"/v1/kv/{key}", content=b"1")
    keys = http.get("/v1/kv/web/?keys&separator=/").json()
    assert keys == ["web/bar", "web/foo", "web/subdir/"]
    return [(keys, "kv-read-keys-response.json")]


def check_kv_put_delete(http: httpx.Client) -> list[tuple[Any, str]]:
    put = http.put("/v1/kv/some/key", content=b"v").json()
    deleted = http.delete("/v1/kv/some/key").json()
    return [(put, "kv-put-response.json"), (deleted, "kv-delete-response.json")]


def check_leader_election(http: httpx.Client) -> list[tuple[Any, str]]:
    session = leader_session(http)
    created = {"ID": session}
    payload = json.dumps(fixture("leader-election-kv-acquire-payload.json")).encode()
    acquired = http.put(f"/v1/kv/service/leader?acquire={session}", content=payload).json()
    assert acquired is True
    read = http.get("/v1/kv/service/leader?index=1")
    index = read.headers["X-Consul-Index"]
    http.put(f"/v1/kv/service/leader?acquire={session}", content=payload + b" ")
    blocking = http.get(f"/v1/kv/service/leader?index={index}&wait=2s").json()
    assert blocking[0]["LockIndex"] == 1  # not the doc sample's 0, see SOURCES.md
    listed = http.get("/v1/session/list").json()
    renewed = http.put(f"/v1/session/renew/{session}").json()
    released = http.put(f"/v1/kv/service/leader?release={session}", content=payload).json()
    # `consul watch -type=key` prints the single entry, not the array; while locked it has Session.
    http.put(f"/v1/kv/service/leader?acquire={session}", content=payload)
    watch_output = http.get("/v1/kv/service/leader").json()[0]
    return [
        (created, "leader-election-session-create-response.json"),
        (acquired, "leader-election-kv-acquire-response.json"),
        (read.json(), "leader-election-kv-read-response.json"),
        (blocking, "leader-election-kv-read-blocking-response.json"),
        (listed, "leader-election-session-list-response.json"),
        (renewed, "leader-election-session-renew-response.json"),
        (released, "leader-election-kv-release-response.json"),
        (watch_output, "leader-election-consul-watch-output.json"),
    ]


def check_sessions(http: httpx.Client) -> list[tuple[Any, str]]:
    request = fixture("session-create-request.json")
    created = http.put("/v1/session/create", json=request)
    assert created.status_code == 200, created.text
    session = created.json()["ID"]
    info = http.get(f"/v1/session/info/{session}").json()
    assert info[0]["TTL"] == "30s"
    assert info[0]["NodeChecks"] == ["a", "b", "c"]
    return [
        (created.json(), "session-create-response.json"),
        (info, "session-info-response.json"),
        (
            http.get("/v1/session/info/00000000-0000-0000-0000-000000000000").json(),
            "session-info-missing-response.json",
        ),
        (http.get("/v1/session/list").json(), "session-list-response.json"),
        (http.get(f"/v1/session/node/{request['Node']}").json(), "session-node-response.json"),
        (http.put(f"/v1/session/renew/{session}").json(), "session-renew-response.json"),
        (http.put(f"/v1/session/destroy/{session}").json(), "session-destroy-response.json"),
    ]


def concrete_txn_request() -> list[dict[str, Any]]:
    """The documented request with its placeholders given real values of the documented types."""
    body = copy.deepcopy(fixture("txn-request.json"))
    kv = body[0]["KV"]
    kv.update(Verb="set", Key="txn/key", Value=base64.b64encode(b"v").decode(), Flags=0, Index=0)
    del kv["Session"]
    return body


def check_txn(http: httpx.Client) -> list[tuple[Any, str]]:
    response = http.put("/v1/txn", json=concrete_txn_request())
    assert response.status_code == 200, response.text
    documented = fixture("txn-response.json")
    ok = response.json()
    assert ok["Errors"] is None
    # The doc sample puts placeholders ("<index>") where numbers go; compare against a
    # version with the placeholders given their real types.
    documented_kv = documented["Results"][0]["KV"]
    documented_kv.update(LockIndex=0, Flags=0, CreateIndex=1, ModifyIndex=1, Value=None)
    # Results are heterogeneous (KV, Node, Check), so compare them position by position.
    pairs = zip(ok["Results"], documented["Results"], strict=True)
    for position, (actual, expected) in enumerate(pairs):
        assert_same_shape(actual, expected, f"$.Results[{position}]")
    failed = http.put("/v1/txn", json=[{"KV": {"Verb": "get", "Key": "absent"}}])
    assert failed.status_code == 409
    errors_doc = [{"OpIndex": 0, "What": "text"}]
    assert_same_shape(failed.json()["Errors"], errors_doc)
    assert failed.json()["Results"] is None
    return []


def check_headers(http: httpx.Client) -> list[tuple[Any, str]]:
    documented = fixture("response-headers-examples.json")["consistency_page_example"]["headers"]
    response = http.get("/v1/catalog/services")
    for name, value in documented.items():
        assert response.headers[name] == value, name
    return []


CHECKS: dict[str, Callable[[httpx.Client], list[tuple[Any, str]]]] = {
    "kv-read": check_kv_read,
    "kv-keys": check_kv_keys,
    "kv-put-delete": check_kv_put_delete,
    "leader-election": check_leader_election,
    "sessions": check_sessions,
    "txn": check_txn,
    "headers": check_headers,
}
# Fixtures checked by hand-written assertions rather than a shape comparison.
COVERED_ELSEWHERE = {
    "txn-request.json": "check_txn sends it",
    "txn-response.json": "check_txn",
    "session-create-request.json": "check_sessions sends it",
    "leader-election-session-create-request.json": "leader_session sends it",
    "leader-election-kv-acquire-payload.json": "check_leader_election sends it",
    "response-headers-examples.json": "check_headers; the ACL example in test_acl",
    "consistency-effective-consistency-response.http.txt": "same headers as check_headers",
    "api-structure-results-filtered-by-acls-response.http.txt": "test_acl filtered header",
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_answers_have_the_documented_shape(name: str, http: httpx.Client) -> None:
    for actual, documented_file in CHECKS[name](http):
        documented = fixture(documented_file)
        # Documented nulls (ServiceChecks, an empty Value) only say the field exists.
        assert_same_shape(actual, documented, f"{documented_file}:$", null_matches_any=True)


def test_every_fixture_is_checked() -> None:
    source = Path(__file__).read_text()
    for path in FIXTURES.iterdir():
        if path.name in NON_JSON:
            continue
        assert path.name in COVERED_ELSEWHERE or f'"{path.name}"' in source, path.name


def test_shape_comparer_catches_differences() -> None:
    documented = [{"Key": "k", "Flags": 0, "Value": "x", "Nested": {"A": [1]}}]
    assert (
        shape_mismatches([{"Key": "a", "Flags": 3, "Value": "y", "Nested": {"A": [2]}}], documented)
        == []
    )
    problems = shape_mismatches(
        [{"Key": 1, "Flags": True, "Nested": {"A": ["s"]}}, "str"], documented
    )
    assert problems == [
        "$[0].Key: expected string, got number (1)",
        "$[0].Flags: expected number, got boolean (True)",
        "$[0].Value: missing (present keys: ['Flags', 'Key', 'Nested'])",
        "$[0].Nested.A[0]: expected number, got string ('s')",
        "$[1]: expected object, got string ('str')",
    ]
    with pytest.raises(ShapeMismatch):
        assert_same_shape({"a": None}, {"a": 1})
    assert_same_shape({"a": 5}, {"a": None}, null_matches_any=True)


def test_session_create_fixture_accepted_once_its_node_is_registered() -> None:
    """agent/consul/state/session.go sessionCreateTxn: a session's node must be registered,
    else ErrMissingNode "Missing node registration" (agent/structs/errors.go), a 500."""
    standin = ConsulStandin(jitter=False)
    server = standin.start()
    try:
        with httpx.Client(base_url=server.url) as http:
            body = fixture("session-create-request.json")
            refused = http.put("/v1/session/create", json=body)
            assert (refused.status_code, refused.text) == (500, "Missing node registration")
            assert http.get("/v1/session/list").json() == []
            standin.register_node(body["Node"])
            assert http.put("/v1/session/create", json=body).status_code == 200
    finally:
        standin.close()
