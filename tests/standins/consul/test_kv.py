"""KV through py-consul and raw HTTP: reads, writes, CAS, deletes, headers, errors."""

from __future__ import annotations

import httpx

import consul
from llm_scheduler_standins.consul import ConsulStandin


def test_put_get_roundtrip_through_py_consul(client: consul.Consul) -> None:
    assert client.kv.put("models/a", b"hello") is True
    index, entry = client.kv.get("models/a")
    assert entry is not None
    assert entry["Value"] == b"hello"
    assert entry["Flags"] == 0
    assert entry["LockIndex"] == 0
    assert "Session" not in entry
    assert int(index) == entry["ModifyIndex"] == entry["CreateIndex"]


def test_missing_key_is_404_with_empty_body_and_index(http: httpx.Client) -> None:
    response = http.get("/v1/kv/nope")
    assert response.status_code == 404
    assert response.content == b""
    assert response.headers["X-Consul-Index"] == "1"
    assert response.headers["X-Consul-KnownLeader"] == "true"
    assert response.headers["X-Consul-LastContact"] == "0"


def test_empty_value_reads_back_as_null(http: httpx.Client) -> None:
    assert http.put("/v1/kv/empty", content=b"").json() is True
    assert http.get("/v1/kv/empty").json()[0]["Value"] is None


def test_flags_are_stored_and_reset_by_a_plain_put(client: consul.Consul) -> None:
    client.kv.put("f", "v", flags=42)
    assert client.kv.get("f")[1]["Flags"] == 42
    client.kv.put("f", "v")
    assert client.kv.get("f")[1]["Flags"] == 0


def test_cas_conflicts_return_false(client: consul.Consul) -> None:
    assert client.kv.put("c", "1", cas=0) is True
    assert client.kv.put("c", "2", cas=0) is False  # create-only on an existing key
    _, entry = client.kv.get("c")
    assert client.kv.put("c", "3", cas=entry["ModifyIndex"] + 100) is False
    assert client.kv.put("c", "3", cas=entry["ModifyIndex"]) is True
    assert client.kv.put("missing", "x", cas=5) is False
    assert client.kv.get("c")[1]["Value"] == b"3"


def test_idempotent_write_keeps_modify_index(client: consul.Consul) -> None:
    client.kv.put("same", "v")
    first = client.kv.get("same")[1]["ModifyIndex"]
    client.kv.put("same", "v")
    assert client.kv.get("same")[1]["ModifyIndex"] == first


def test_recurse_keys_and_separator(client: consul.Consul, http: httpx.Client) -> None:
    for key in ("web/bar", "web/foo", "web/subdir/x", "web/subdir/y", "webby"):
        client.kv.put(key, "1")
    _, entries = client.kv.get("web/", recurse=True)
    assert [e["Key"] for e in entries] == ["web/bar", "web/foo", "web/subdir/x", "web/subdir/y"]
    _, keys = client.kv.get("web/", keys=True, separator="/")
    assert keys == ["web/bar", "web/foo", "web/subdir/"]
    # The misspelt alias Consul accepts, and presence-only flags (`recurse=false` recurses).
    assert http.get("/v1/kv/web/?keys&seperator=/").json() == keys
    assert len(http.get("/v1/kv/web?recurse=false").json()) == 5
    assert client.kv.get("nothing/", recurse=True)[1] is None
    assert http.get("/v1/kv/nothing/?keys").status_code == 404
    assert http.get("/v1/kv/?keys").json() == sorted(
        ["web/bar", "web/foo", "web/subdir/x", "web/subdir/y", "webby"]
    )


def test_raw_returns_the_bytes(http: httpx.Client) -> None:
    http.put("/v1/kv/raw", content=b"\x00\x01abc")
    response = http.get("/v1/kv/raw?raw")
    assert response.content == b"\x00\x01abc"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_delete_recurse_and_cas(client: consul.Consul) -> None:
    client.kv.put("d/a", "1")
    client.kv.put("d/b", "1")
    client.kv.put("dx", "1")
    entry = client.kv.get("d/a")[1]
    assert client.kv.delete("d/a", cas=entry["ModifyIndex"] + 1) is False
    assert client.kv.delete("d/a", cas=entry["ModifyIndex"]) is True
    assert client.kv.delete("never-there", cas=3) is True  # Consul quirk: missing key is true
    assert client.kv.delete("d/", recurse=True) is True
    assert client.kv.get("d/", recurse=True)[1] is None
    assert client.kv.get("dx")[1] is not None


def test_delete_raises_recursive_index_through_tombstones(http: httpx.Client) -> None:
    http.put("/v1/kv/t/a", content=b"1")
    http.put("/v1/kv/t/b", content=b"1")
    before = int(http.get("/v1/kv/t/?recurse").headers["X-Consul-Index"])
    http.delete("/v1/kv/t/b")
    after = int(http.get("/v1/kv/t/?recurse").headers["X-Consul-Index"])
    assert after > before


def test_value_over_512_kib_is_413_text(http: httpx.Client) -> None:
    response = http.put("/v1/kv/big", content=b"x" * (512 * 1024 + 1))
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith("Request body(524289 bytes) too large, max size: 524288 bytes.")
    assert http.put("/v1/kv/big", content=b"x" * (512 * 1024)).json() is True


def test_bad_requests_answer_plain_text(http: httpx.Client) -> None:
    cases = {
        "/v1/kv/a?index=abc": "Invalid index",
        "/v1/kv/a?index=5&wait=forever": "Invalid wait time",
        "/v1/kv/a?stale&consistent": (
            "Cannot specify ?stale with ?consistent, conflicting semantics."
        ),
        "/v1/kv/": "Missing key name",
    }
    for url, text in cases.items():
        response = http.get(url)
        assert (response.status_code, response.text) == (400, text), url
    conflict = http.put("/v1/kv/a?cas=0&acquire=x", content=b"")
    assert conflict.status_code == 400
    assert conflict.text.startswith("Conflicting flags: ")


def test_direct_helpers(standin: ConsulStandin, client: consul.Consul) -> None:
    assert standin.index == 1
    standin.kv_put("h", "v")
    assert standin.kv_get("h") == b"v"
    assert standin.kv_get("none") is None
    assert client.kv.get("h")[1]["Value"] == b"v"
    assert standin.index > 1


def test_concurrent_cas_increments_lose_no_update(client: consul.Consul) -> None:
    import threading

    client.kv.put("counter", "0")

    def increment(times: int) -> None:
        done = 0
        while done < times:
            _, entry = client.kv.get("counter")
            value = int(entry["Value"]) + 1
            if client.kv.put("counter", str(value), cas=entry["ModifyIndex"]):
                done += 1

    threads = [threading.Thread(target=increment, args=(10,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert client.kv.get("counter")[1]["Value"] == b"40"
