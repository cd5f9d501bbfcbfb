"""/v1/txn: verbs, shared index, 409 rollback shape and What texts, 64-op limit."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

import consul


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_write_txn_shares_one_index_and_reads_values(client: consul.Consul) -> None:
    result = client.txn.put(
        [
            {"KV": {"Verb": "set", "Key": "t/a", "Value": b64("1")}},
            {"KV": {"Verb": "set", "Key": "t/b", "Value": b64("2"), "Flags": 9}},
            {"KV": {"Verb": "get-tree", "Key": "t/"}},
        ]
    )
    assert result["Errors"] is None
    sets = [r["KV"] for r in result["Results"][:2]]
    assert sets[0]["ModifyIndex"] == sets[1]["ModifyIndex"]
    assert all(kv["Value"] is None for kv in sets)
    tree = [r["KV"] for r in result["Results"][2:]]
    assert [(kv["Key"], kv["Value"]) for kv in tree] == [("t/a", b64("1")), ("t/b", b64("2"))]
    assert client.kv.get("t/b")[1]["Flags"] == 9


def test_failed_txn_rolls_back_with_every_error(http: httpx.Client) -> None:
    http.put("/v1/kv/exists", content=b"v")
    index = http.get("/v1/kv/exists").json()[0]["ModifyIndex"]
    response = http.put(
        "/v1/txn",
        json=[
            {"KV": {"Verb": "set", "Key": "new", "Value": b64("x")}},
            {"KV": {"Verb": "cas", "Key": "exists", "Value": b64("y"), "Index": index + 7}},
            {"KV": {"Verb": "check-not-exists", "Key": "exists"}},
            {"KV": {"Verb": "get", "Key": "missing"}},
            {"KV": {"Verb": "check-index", "Key": "exists", "Index": index + 1}},
            {"KV": {"Verb": "unlock", "Key": "exists", "Session": "s"}},
            {"KV": {"Verb": "frobnicate", "Key": "exists"}},
        ],
    )
    assert response.status_code == 409
    body = response.json()
    assert body["Results"] is None
    assert body["Errors"] == [
        {"OpIndex": 1, "What": 'failed to set key "exists", index is stale'},
        {"OpIndex": 2, "What": 'key "exists" exists'},
        {"OpIndex": 3, "What": 'key "missing" doesn\'t exist'},
        {
            "OpIndex": 4,
            "What": (
                f'failed index check for key "exists", current modify index {index} != {index + 1}'
            ),
        },
        {
            "OpIndex": 5,
            "What": (
                'failed to unlock key "exists", lock isn\'t held, or is held by another session'
            ),
        },
        {"OpIndex": 6, "What": 'unknown KV verb "frobnicate"'},
    ]
    assert http.get("/v1/kv/new").status_code == 404  # op 0 was rolled back


def test_py_consul_raises_client_error_with_409_body(client: consul.Consul) -> None:
    with pytest.raises(consul.ConsulException) as caught:
        client.txn.put([{"KV": {"Verb": "get", "Key": "nope"}}])
    message = str(caught.value)
    assert message.startswith("409 ")
    assert json.loads(message[4:])["Errors"][0]["What"] == 'key "nope" doesn\'t exist'


def test_lock_and_session_checks(client: consul.Consul, http: httpx.Client) -> None:
    sid = client.session.create(lock_delay=0)
    ok = http.put(
        "/v1/txn",
        json=[
            {"KV": {"Verb": "lock", "Key": "L", "Value": b64("me"), "Session": sid}},
            {"KV": {"Verb": "check-session", "Key": "L", "Session": sid}},
        ],
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["Results"][0]["KV"]["LockIndex"] == 1
    other = client.session.create(lock_delay=0)
    held = http.put(
        "/v1/txn",
        json=[{"KV": {"Verb": "lock", "Key": "L", "Value": b64("x"), "Session": other}}],
    )
    assert held.json()["Errors"][0]["What"] == 'failed to lock key "L", lock is already held'
    mismatch = http.put(
        "/v1/txn", json=[{"KV": {"Verb": "check-session", "Key": "L", "Session": other}}]
    )
    assert mismatch.json()["Errors"][0]["What"] == (
        f'failed session check for key "L", current session "{sid}" != "{other}"'
    )


def test_delete_verbs_produce_no_results(http: httpx.Client) -> None:
    http.put("/v1/kv/d/a", content=b"1")
    http.put("/v1/kv/d/b", content=b"1")
    http.put("/v1/kv/c", content=b"1")
    index = http.get("/v1/kv/c").json()[0]["ModifyIndex"]
    response = http.put(
        "/v1/txn",
        json=[
            {"KV": {"Verb": "delete-tree", "Key": "d/"}},
            {"KV": {"Verb": "delete-cas", "Key": "c", "Index": index}},
        ],
    )
    assert response.json() == {"Results": [], "Errors": None}
    assert http.get("/v1/kv/?keys").json() == []


def test_limits_and_parse_errors(http: httpx.Client) -> None:
    ops = [{"KV": {"Verb": "get", "Key": f"k{n}"}} for n in range(65)]
    response = http.put("/v1/txn", json=ops)
    assert (response.status_code, response.text) == (
        413,
        "Transaction contains too many operations (65 > 64)",
    )
    bad = http.put("/v1/txn", content=b"[{")
    assert bad.status_code == 400
    assert bad.text.startswith("Failed to parse body: ")
