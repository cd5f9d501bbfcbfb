"""`<prefix>status/<model>` records, written only when their content changes, with CAS.

{desired, live, pending, pending_code, rollout, why,
replicas: [{id, state, nodes, node_names, devices}], last_error,
timed_out: [{replica, code, reason}], reserved, updated_at}, for a prefetching model `prefetch`
({wanted, cached, running, failed, short, short_code, last_error}), and while the model is
pending `tried`: what each profile ran into (per filter, on how many nodes), which
`llm-scheduler why` shows without deciding again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler.adapters.consul_kv import (
    MAX_TXN_OPS,
    ConsulClient,
    kv_cas,
    kv_delete_cas,
    kv_get,
    kv_txn_cas,
)
from scheduler.adapters.json_bounds import bounded_loads
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import ModelStatus, Replica
from scheduler.core.prefetch_records import PrefetchStatus


def status_record(
    status: ModelStatus | None,
    replicas: list[Replica],
    last_error: str | None,
    node_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`node_names`: node id -> name, so that an operator reads names beside the ids."""
    names = node_names or {}
    return {
        "desired": status.desired if status else 0,
        "live": status.live if status else sum(1 for r in replicas if r.counts),
        "pending": status.pending if status else None,
        # What kind of reason `pending` is (core/codes.py): what tools should key by.
        "pending_code": status.pending_code if status else None,
        "rollout": status.rollout if status else None,
        # Which signal set the count, e.g. "3 replicas: ttft p90 840 ms > 500 ms ..."
        "why": status.why if status else None,
        "replicas": [
            {
                "id": r.id,
                "state": r.state,
                "nodes": [s.node for s in r.shards],
                "node_names": [names.get(s.node, s.node) for s in r.shards],
                "devices": [d for s in r.shards for d in s.gpus],
            }
            for r in sorted(replicas, key=lambda r: r.id)
        ],
        "last_error": last_error,
        # Replicas this pass stopped still starting past the load grace, with why.
        "timed_out": [t.model_dump(mode="json") for t in status.timed_out] if status else [],
        # Room kept for it after a preemption, or why that room was released.
        "reserved": status.reserved if status else None,
        # Only while pending: a placed model's record keeps its content (and is not rewritten).
        **(
            {"tried": [t.model_dump(mode="json") for t in status.tried]}
            if status is not None and status.pending is not None
            else {}
        ),
    }


def prefetch_record(
    status: PrefetchStatus, last_error: str | None, node_names: Mapping[str, str]
) -> dict[str, Any]:
    """A prefetching model's `prefetch` (rules PF1-PF3): where its weights are kept, where a
    download runs or failed (node names), why fewer than wanted, and its last failed call."""
    record = status.model_dump(mode="json")
    for key in ("cached", "running", "failed"):
        record[key] = [node_names.get(n, n) for n in record[key]]
    record["last_error"] = last_error
    return record


class StatusWriter:
    def __init__(self, consul_client: ConsulClient, layout: KVLayout) -> None:
        self.consul = consul_client
        self.layout = layout
        self._written: dict[str, tuple[str, int]] = {}  # key -> (content, ModifyIndex)

    def write(self, key: str, record: dict[str, Any], updated_at: str) -> bool:
        """Write `record` under `key` unless it already says that; True when written."""
        content = json.dumps(record, sort_keys=True)
        known = self._written.get(key)
        if known is None or (known[1] < 0 and known[0] != content):
            entry = kv_get(self.consul, key)
            index = int(entry["ModifyIndex"]) if entry else 0
            old = _content(entry)
            known = (old, index)
            self._written[key] = known
        if known[0] == content:
            return False
        body = json.dumps({**record, "updated_at": updated_at})
        for _ in range(3):
            if kv_cas(self.consul, key, body, known[1]):
                # The new ModifyIndex comes with the next pass's KV read (prime); until then
                # a CAS on the stale index fails and re-reads, which is correct, only slower.
                self._written[key] = (content, -1)
                return True
            entry = kv_get(self.consul, key)  # someone else wrote it: compare again
            known = (_content(entry), int(entry["ModifyIndex"]) if entry else 0)
            if known[0] == content:
                self._written[key] = known
                return False
        return False

    def write_many(self, records: list[tuple[str, dict[str, Any]]], updated_at: str) -> int:
        """`write` for many keys: the changed ones whose index is known go out together in
        Consul transactions (one round trip instead of one per model); the rest, and any
        transaction a concurrent write made stale, one by one. How many were written."""
        batch: list[tuple[str, str, str, int]] = []  # key, content, body, index
        written = 0
        for key, record in records:
            content = json.dumps(record, sort_keys=True)
            known = self._written.get(key)
            if known is not None and known[0] == content:
                continue
            if known is None or known[1] < 0:
                written += self.write(key, record, updated_at)
                continue
            body = json.dumps({**record, "updated_at": updated_at})
            batch.append((key, content, body, known[1]))
        for start in range(0, len(batch), MAX_TXN_OPS):
            chunk = batch[start : start + MAX_TXN_OPS]
            if kv_txn_cas(self.consul, [(k, body, i) for k, _, body, i in chunk]):
                for key, content, _, _ in chunk:
                    self._written[key] = (content, -1)
                written += len(chunk)
                continue
            for key, content, _, _ in chunk:
                self._written.pop(key, None)  # re-read and compare, one by one
                written += self.write(key, json.loads(content), updated_at)
        return written

    def delete(self, key: str) -> bool:
        """Remove a record (CAS on the index last seen); True when it is gone."""
        known = self._written.get(key)
        index = known[1] if known is not None and known[1] > 0 else None
        if index is None:
            entry = kv_get(self.consul, key)
            if entry is None:
                self._written.pop(key, None)
                return True
            index = int(entry["ModifyIndex"])
        done = kv_delete_cas(self.consul, key, index)
        self._written.pop(key, None)  # re-read next time either way
        return done

    def prime(self, entries: list[dict[str, Any]]) -> None:
        """Learn current values and ModifyIndexes from a KV read made anyway (saves a GET each)."""
        for entry in entries:
            key = str(entry.get("Key", ""))
            if self.layout.written_by_scheduler(key):
                self._written[key] = (_content(entry), int(entry.get("ModifyIndex") or 0))

    def forget(self) -> None:
        """Drop the cache (e.g. after losing and regaining leadership)."""
        self._written.clear()


def _content(entry: dict[str, Any] | None) -> str:
    if not entry or not entry.get("Value"):
        return ""
    try:
        data = bounded_loads(entry["Value"], 1 << 20)
        data.pop("updated_at", None)
        return json.dumps(data, sort_keys=True)
    except (ValueError, TypeError, AttributeError):
        return ""
