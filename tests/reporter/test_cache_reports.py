"""The scheduler's side of the cache reports: parsed at the boundary into the nodes' cache
facts; a malformed, oversized or stale report is one line by key and field and leaves that node
cold, and never takes anything else away (GPU health, feasibility, replicas)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.cache_reports import node_cache
from scheduler.adapters.gpu_reports import apply_reports
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.fleet import CachedSnapshot, NodeCache
from scheduler.core.models import GPU, Node
from scheduler.core.warmth import weight_bytes
from scheduler.reporter.cache_record import MAX_SNAPSHOTS

KEY = KVLayout().node_gpus_key("n1")
VOLUME = "llm-model-cache"
A = "a" * 40
GB = 10**9


def _node(**changes: Any) -> Node:
    base = Node(id="n1", name="gpu-1", cpu_cores=8, memory_gb=64, host_volumes=[VOLUME])
    return base.model_copy(update=changes) if changes else base


def _snapshot(**changes: Any) -> dict[str, Any]:
    return {"source": "org/m", "commit": A, "revisions": ["main"], "bytes": 30 * GB} | changes


def _cache(*snapshots: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"volume": VOLUME, "free_bytes": 500 * GB, "snapshots": list(snapshots)} | changes


def test_a_good_report_becomes_the_nodes_cache_facts() -> None:
    used = "2026-12-01T00:00:00Z"
    node, warnings = node_cache(
        _node(), _cache(_snapshot(last_used=used, weights_bytes=28 * GB)), KEY, {"org/m"}
    )
    assert warnings == []
    assert node.cache == NodeCache(
        volume=VOLUME,
        free_bytes=500 * GB,
        snapshots=[
            CachedSnapshot(
                source="org/m",
                commit=A,
                revisions=["main"],
                bytes=30 * GB,
                weights_bytes=28 * GB,
                last_used=datetime(2026, 12, 1, tzinfo=UTC),
            )
        ],
    )


@pytest.mark.parametrize(
    ("cache", "field"),
    [
        (_cache(_snapshot(bytes=-1)), "cache.snapshots.0.bytes"),
        (_cache(_snapshot(bytes=10**16)), "cache.snapshots.0.bytes"),
        (_cache(_snapshot(bytes="30")), "cache.snapshots.0.bytes"),
        (_cache(_snapshot(commit="main")), "cache.snapshots.0.commit"),
        (_cache(_snapshot(commit="A" * 40)), "cache.snapshots.0.commit"),
        (_cache(_snapshot(source="../../etc")), "cache.snapshots.0.source"),
        (_cache(_snapshot(weights_bytes=0)), "cache.snapshots.0.weights_bytes"),
        (_cache(_snapshot(last_used="9999-01-01T00:00:00Z")), "cache.snapshots.0.last_used"),
        (_cache(free_bytes=-5), "cache.free_bytes"),
        (_cache(*[_snapshot()] * (MAX_SNAPSHOTS + 1)), "cache.snapshots"),
        (_cache(volume=""), "cache.volume"),
        ([1, 2], "cache.(the whole value)"),
    ],
)
def test_a_bad_report_names_key_and_field_and_leaves_the_node_cold(cache: Any, field: str) -> None:
    node, warnings = node_cache(_node(), cache, KEY, {"org/m"})
    assert node.cache is None
    (line,) = warnings
    assert KEY in line and f"field {field}:" in line and "cold" in line


def test_a_model_not_in_the_catalog_is_left_out_by_key_and_field() -> None:
    cache = _cache(_snapshot(), _snapshot(source="other/x"), _snapshot(source="other/y"))
    node, warnings = node_cache(_node(), cache, KEY, {"org/m"})
    assert node.cache is not None and [s.source for s in node.cache.snapshots] == ["org/m"]
    (line,) = warnings
    assert KEY in line and "cache.snapshots.1.source" in line and "1 more" in line


def test_a_volume_the_node_no_longer_advertises_makes_it_cold() -> None:
    node, warnings = node_cache(_node(host_volumes=[]), _cache(_snapshot()), KEY, {"org/m"})
    assert node.cache is None
    (line,) = warnings
    assert KEY in line and "cache.volume" in line and "left running" in line


def test_a_bad_cache_part_keeps_the_gpu_health_in_force() -> None:
    gpu = GPU(id="GPU-1", model="NVIDIA H100 80GB HBM3", memory_gb=80)
    record = {
        "node_id": "n1",
        "reported_at": "2026-12-01T00:00:00Z",
        "gpus": [{"index": 0, "uuid": "GPU-1", "name": gpu.model, "lost": True}],
        "cache": _cache(_snapshot(bytes=-1)),
    }
    (node,), warnings = apply_reports(
        [_node(gpus=[gpu])], {"n1": json.dumps(record)}, sources={"org/m"}
    )
    assert [g.healthy for g in node.gpus] == [False] and node.cache is None
    assert any("cache.snapshots.0.bytes" in w for w in warnings)
    good = record | {"cache": _cache(_snapshot())}
    (node,), _ = apply_reports([_node(gpus=[gpu])], {"n1": json.dumps(good)}, sources={"org/m"})
    assert node.cache is not None and node.eligible


def test_weight_size_from_index_then_bytes_then_serve_else_unknown() -> None:
    def cached(**snapshot: Any) -> Node:
        return node_cache(_node(), _cache(_snapshot(**snapshot)), KEY, {"org/m"})[0]

    assert weight_bytes("org/m", [cached(weights_bytes=28 * GB)], 99.0) == 28 * GB
    assert weight_bytes("org/m", [cached()], 99.0) == 30 * GB
    assert weight_bytes("org/m", [_node()], 99.0) == 99 * GB
    assert weight_bytes("org/m", [_node()]) is None
    assert weight_bytes("org/m", [cached(bytes=0)]) is None


def test_a_cache_holds_a_revision_by_ref_or_commit() -> None:
    node, _ = node_cache(_node(), _cache(_snapshot(revisions=["main", "v1"])), KEY, {"org/m"})
    assert node.cache is not None
    holds = node.cache.holds
    assert holds("org/m", None) and holds("org/m", "v1") and holds("org/m", A)
    assert not holds("org/m", "v2") and not holds("org/m", "b" * 40) and not holds("org/x", None)


def test_serve_weights_gb_is_optional_positive_and_rolls_nothing() -> None:
    from scheduler.adapters.nomad_jobs import spec_digest
    from scheduler.core.models import Model

    def model(**serve: Any) -> Model:
        return Model.model_validate(
            {
                "name": "m",
                "owner": "org/a",
                "profiles": [{"name": "p"}],
                "serve": {"source": "org/m", **serve},
            }
        )

    bare, sized = model(), model(weights_gb=140)
    assert spec_digest(bare, bare.profiles[0]) == spec_digest(sized, sized.profiles[0])
    assert sized.serve is not None and sized.serve.weights_gb == 140
    for bad in (0, -1, "140", float("nan")):
        with pytest.raises(ValueError, match="weights_gb"):
            model(weights_gb=bad)
    assert weight_bytes("org/m", [_node()], sized.serve.weights_gb) == 140 * GB
