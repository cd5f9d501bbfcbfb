"""Malformed KV values of every kind the service has met or may meet.

Each is (what it is, raw bytes). They are thrown at every prefix of the KV layout; a value
is bad for a prefix when it breaks that prefix's schema, and none may stop a pass.
"""

from __future__ import annotations

import json
from typing import Any

GOOD_MODEL: dict[str, Any] = {
    "owner": "org/a",
    "class": "standard",
    "scaling": {"min": 0, "max": 2, "target_per_replica": 10},
    "profiles": [{"name": "p", "gpus": 1}],
}


def _model(**change: Any) -> bytes:
    value = json.loads(json.dumps(GOOD_MODEL))
    for path, v in change.items():
        *head, last = path.split("__")
        node = value
        for part in head:
            node = node[part]
        node[last] = v
    return json.dumps(value).encode()


def _raw_model(field_path: str, literal: str) -> bytes:
    """A model whose `field_path` (dotted) holds `literal` verbatim (not JSON-escaped)."""
    marker = "__MARK__"
    body = _model(**{field_path.replace(".", "__"): marker}).decode()
    return body.replace(json.dumps(marker), literal).encode()


def generic_values() -> list[tuple[str, bytes]]:
    """Values bad under any prefix: not JSON, out of bounds, or the wrong shape."""
    deep = b"[" * 20000 + b"]" * 20000  # 40 KB, RecursionError for json.loads
    deep_obj = b'{"a":' * 5000 + b"1" + b"}" * 5000
    return [
        ("deep list", deep),
        ("deep object", deep_obj),
        ("deep and large", (b"[" * 30000 + b"]" * 30000)[:61000]),
        ("NaN", b"NaN"),
        ("Infinity", b"Infinity"),
        ("-Infinity", b"-Infinity"),
        ("1e999", b"1e999"),
        ("400 digits", b"9" * 400),
        ("not JSON", b"{owner: 7"),
        ("truncated", b'{"owner": "org/a", "profiles": [{'),
        ("empty", b""),
        ("blank", b"   \n"),
        ("null", b"null"),
        ("a list", b"[1, 2, 3]"),
        ("a string", b'"llama"'),
        ("a number", b"42"),
        ("true", b"true"),
        ("invalid utf-8", b'{"owner": "\xff\xfe"}'),
        ("NUL byte", b'{"owner": "org/a\x00"}'),
        ("escaped NUL", b'{"owner": "org/a\\u0000"}'),
        ("huge string", json.dumps({"owner": "x" * 60000}).encode()),
        ("many keys", json.dumps({f"k{i}": i for i in range(6000)}).encode()),
        ("unicode owner", json.dumps({"owner": "org/ünï©ødé"}).encode()),
        ("emoji", json.dumps({"owner": "org/🦙"}).encode()),
        ("newline in field", json.dumps({"owner": "org/a\nb"}).encode()),
        ("over the size limit", b'{"x": "' + b"a" * 70000 + b'"}'),
    ]


def model_values() -> list[tuple[str, bytes]]:
    return [
        ("target 1e-320", _model(scaling__target_per_replica=1e-320)),
        ("target 0", _model(scaling__target_per_replica=0)),
        ("target NaN", _raw_model("scaling.target_per_replica", "NaN")),
        ("target Infinity", _raw_model("scaling.target_per_replica", "Infinity")),
        ("target 1e999", _raw_model("scaling.target_per_replica", "1e999")),
        ("max 400 digits", _raw_model("scaling.max", "9" * 400)),
        ("max 1e12", _model(scaling__max=10**12)),
        ("min negative", _model(scaling__min=-1)),
        ("min > max", _model(scaling__min=3, scaling__max=1)),
        ("min a list", _model(scaling__min=[1])),
        ("min a float", _model(scaling__min=1.5)),
        ("owner ..", _model(owner="org/../a")),
        ("owner .", _model(owner="org/./a")),
        ("owner leading /", _model(owner="/org/a")),
        ("owner empty", _model(owner="")),
        ("owner NUL", _model(owner="org\x00a")),
        ("owner huge", _model(owner="o" * 5000)),
        ("class unknown", _model(**{"class": "vip"})),
        ("profiles empty", _model(profiles=[])),
        ("profiles a dict", _model(profiles={"name": "p"})),
        ("profile gpus 0", _model(profiles=[{"name": "p", "gpus": 0}])),
        ("profile gpus 1e6", _model(profiles=[{"name": "p", "gpus": 10**6}])),
        ("profile memory inf", _raw_model("profiles", '[{"name": "p", "memory_gb": Infinity}]')),
        ("profile memory 1e300", _model(profiles=[{"name": "p", "memory_gb": 1e300}])),
        ("profile cpu negative", _model(profiles=[{"name": "p", "cpu_cores": -4}])),
        ("profile name empty", _model(profiles=[{"name": ""}])),
        ("profile name huge", _model(profiles=[{"name": "p" * 3000}])),
        ("profile duplicate", _model(profiles=[{"name": "p"}, {"name": "p"}])),
        ("mig with gpus 2", _model(profiles=[{"name": "p", "mig_profile": "3g.40gb", "gpus": 2}])),
        ("unknown field", _model(colour="blue")),
        ("name mismatch", _model(name="someone-else")),
        ("runtime bad", _model(runtime="../../etc")),
        ("load grace huge", _model(load_grace_s=10**14)),
        ("params not strings", _model(params={"a": 1})),
        ("params NUL", _model(params={"a": "b\x00"})),
        ("profiles deep", _model(profiles=json.loads("[" * 15 + "]" * 15))),
        ("scaling null", _model(scaling=None)),
        ("gpu_models a string", _model(profiles=[{"name": "p", "gpu_models": "H100"}])),
        ("profile name quote", _model(profiles=[{"name": 'p"q'}])),
        ("profile name ${", _model(profiles=[{"name": "${x}"}])),
        ("profile name ../", _model(profiles=[{"name": "../p"}])),
        ("profile name newline", _model(profiles=[{"name": "p\nq"}])),
        ("gpu_models ${", _model(profiles=[{"name": "p", "gpu_models": ["${x}"]}])),
        ("gpu_models newline", _model(profiles=[{"name": "p", "gpu_models": ["H100\n"]}])),
        ("mig_profile unknown", _model(profiles=[{"name": "p", "mig_profile": "9g.99gb"}])),
        ("mig_profile quote", _model(profiles=[{"name": "p", "mig_profile": '1g"'}])),
        ("gpus a numeric string", _model(profiles=[{"name": "p", "gpus": "1"}])),
    ]


def demand_values() -> list[tuple[str, bytes]]:
    return [
        ("inflight 400 digits", b'{"inflight": ' + b"9" * 400 + b"}"),
        ("inflight 1e12", b'{"inflight": 1000000000000}'),
        ("inflight NaN", b'{"inflight": NaN}'),
        ("inflight Infinity", b'{"inflight": Infinity}'),
        ("inflight 1e999", b'{"inflight": 1e999}'),
        ("inflight negative", b'{"inflight": -5}'),
        ("inflight float", b'{"inflight": 2.5}'),
        ("inflight string", b'{"inflight": "lots"}'),
        ("queued huge", b'{"queued": 99999999999999}'),
        ("last_used garbage", b'{"last_used": "yesterday"}'),
        ("last_used naive", b'{"last_used": "2026-12-02T10:00:00"}'),
        ("last_used year 0", b'{"last_used": "0000-01-01T00:00:00Z"}'),
        ("last_used number", b'{"last_used": 1e300}'),
        ("unknown field", b'{"inflight": 1, "rps": 3}'),
        ("last_used year 9999", b'{"last_used": "9999-12-31T23:59:00Z"}'),
        ("inflight a numeric string", b'{"inflight": "5"}'),
    ]


def demand_key_names() -> list[str]:
    """Demand key tails that can never name a model."""
    return ["名前", 'a"b', "${x}", "a\nb", "a\x00b", "Upper", "x" * 300, "x/y"]


def quota_values() -> list[tuple[str, bytes]]:
    return [
        ("guarantee inf", b'{"guarantee": {"gpus": Infinity}}'),
        ("limit NaN", b'{"limit": {"gpus": NaN}}'),
        ("limit 1e999", b'{"limit": {"gpus": 1e999}}'),
        ("limit 1e300", b'{"limit": {"gpus": 1e300}}'),
        ("limit negative", b'{"limit": {"gpus": -1}}'),
        ("limit 400 digits", b'{"limit": {"gpus": ' + b"9" * 400 + b"}}"),
        ("owner mismatch", b'{"owner": "org/zz"}'),
        ("unknown amount", b'{"limit": {"tpus": 3}}'),
        ("guarantee a list", b'{"guarantee": [1]}'),
    ]


def settings_values() -> list[tuple[str, bytes]]:
    return [
        ("preempt_hold_s 1e14", b'{"preempt_hold_s": 100000000000000}'),
        ("eviction_grace_s 400 digits", b'{"eviction_grace_s": ' + b"9" * 400 + b"}"),
        ("min_lifetime_s NaN", b'{"min_lifetime_s": NaN}'),
        ("retire_grace_s negative", b'{"retire_grace_s": -1}'),
        ("max_victims huge", b'{"max_victims": 1000000}'),
    ]


def gpu_report_values() -> list[tuple[str, bytes]]:
    return [
        (
            "report memory inf",
            b'{"node_id": "n", "gpus": [{"uuid": "GPU-1", "memory_gb": Infinity}]}',
        ),
        ("report 400 digits", b'{"node_id": "n", "reported_at": ' + b"9" * 400 + b"}"),
        ("report gpus a string", b'{"node_id": "n", "gpus": "all"}'),
    ]


def state_values() -> list[tuple[str, bytes]]:
    return [
        ("holds until garbage", b'{"holds": {"x": {"until": "soon", "for": "y"}}}'),
        (
            "holds until year 9999",
            b'{"holds": {"x": {"until": "9999-12-31T23:59:59Z", "for": "y"}}}',
        ),
        ("preempted a list", b'{"preempted": [1, 2]}'),
        ("holds a string", b'{"holds": "all"}'),
        ("reservations a string", b'{"reservations": "all"}'),
        ("reservation until garbage", b'{"reservations": {"x": [{"since": "x", "until": "y"}]}}'),
    ]
