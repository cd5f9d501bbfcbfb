"""Executes the KV operations of a /v1/txn on a copy of the KV table (state/txn.go semantics).

All operations share one index; every failing operation is reported, and on any failure the
copy is thrown away so nothing is applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from llm_scheduler_standins.consul.acl import Caller
from llm_scheduler_standins.consul.kv_routes import dir_entry_json
from llm_scheduler_standins.consul.store import ConsulStore
from llm_scheduler_standins.consul.tables import KVEntry, KVTable

WRITE_VERBS = frozenset({"set", "cas", "lock", "unlock", "delete", "delete-tree", "delete-cas"})
CHECK_VERBS = frozenset({"check-index", "check-session", "check-not-exists"})
READ_VERBS = frozenset({"get", "get-or-empty", "get-tree"})


@dataclass(frozen=True)
class KVOp:
    verb: str
    key: str
    value: bytes
    flags: int
    index: int
    session: str


@dataclass
class TxnOutcome:
    results: list[tuple[int, dict[str, Any]]]  # (op position, result)
    errors: list[dict[str, Any]]


def q(text: str) -> str:
    """Go's %q for the keys and sessions in error texts."""
    return json.dumps(text)


class _Run:
    def __init__(self, store: ConsulStore, caller: Caller, table: KVTable, index: int) -> None:
        self.store = store
        self.caller = caller
        self.table = table
        self.index = index

    def apply(self, op: KVOp) -> list[dict[str, Any]]:
        """Results for one op; raises ValueError with the What text on failure."""
        existing = self.table.entries.get(op.key)
        if op.verb in ("set", "cas", "lock", "unlock"):
            return [self._put(self._written(op, existing))]
        if op.verb in ("get", "get-or-empty", "get-tree"):
            return self._read(op, existing)
        if op.verb.startswith("check-"):
            return self._checked(op, existing)
        if op.verb in ("delete", "delete-tree", "delete-cas"):
            self._delete(op, existing)
            return []
        raise ValueError(f"unknown KV verb {q(op.verb)}")

    def _written(self, op: KVOp, existing: KVEntry | None) -> KVEntry:
        if op.verb == "set":
            return self._set_entry(op, existing)
        if op.verb == "cas":
            stale = (
                existing is not None
                if op.index == 0
                else (existing is None or existing.modify_index != op.index)
            )
            if stale:
                raise ValueError(f"failed to set key {q(op.key)}, index is stale")
            return self._set_entry(op, existing)
        if op.verb == "lock":
            return self._lock(op, existing)
        if existing is None or existing.session != op.session:
            raise ValueError(
                f"failed to unlock key {q(op.key)}, lock isn't held, or is held by another session"
            )
        return replace(
            existing, value=op.value, flags=op.flags, session="", modify_index=self.index
        )

    def _read(self, op: KVOp, existing: KVEntry | None) -> list[dict[str, Any]]:
        if op.verb == "get-tree":
            return [dir_entry_json(e) for e in self.table.under(op.key)]
        if existing is None:
            if op.verb == "get":
                raise ValueError(f"key {q(op.key)} doesn't exist")
            return [dir_entry_json(KVEntry(op.key, b"", 0, 0, "", 0, 0))]
        return [dir_entry_json(existing)]

    def _checked(self, op: KVOp, existing: KVEntry | None) -> list[dict[str, Any]]:
        if op.verb == "check-index":
            if existing is None:
                raise ValueError(f"failed to check index, key {q(op.key)} doesn't exist")
            if existing.modify_index != op.index:
                raise ValueError(
                    f"failed index check for key {q(op.key)}, current modify index "
                    f"{existing.modify_index} != {op.index}"
                )
            return [dir_entry_json(existing, with_value=False)]
        if op.verb == "check-session":
            if existing is None:
                raise ValueError(f"failed to check session, key {q(op.key)} doesn't exist")
            if existing.session != op.session:
                raise ValueError(
                    f"failed session check for key {q(op.key)}, current session "
                    f"{q(existing.session)} != {q(op.session)}"
                )
            return [dir_entry_json(existing, with_value=False)]
        if op.verb == "check-not-exists":
            if existing is not None:
                raise ValueError(f"key {q(op.key)} exists")
            return []
        raise ValueError(f"unknown KV verb {q(op.verb)}")

    def _delete(self, op: KVOp, existing: KVEntry | None) -> None:
        if op.verb == "delete-tree":
            for entry in self.table.under(op.key):
                self.table.delete(entry.key, self.index)
            return
        if op.verb == "delete-cas" and existing is not None and existing.modify_index != op.index:
            raise ValueError(f"failed to delete key {q(op.key)}, index is stale")
        self.table.delete(op.key, self.index)

    def _set_entry(self, op: KVOp, existing: KVEntry | None) -> KVEntry:
        if existing is None:
            return KVEntry(op.key, op.value, op.flags, 0, "", self.index, self.index)
        entry = replace(existing, value=op.value, flags=op.flags, modify_index=self.index)
        return existing if existing.same_content(entry) else entry

    def _lock(self, op: KVOp, existing: KVEntry | None) -> KVEntry:
        if self.store.lock_delayed(op.key):
            raise ValueError(f"failed to lock key {q(op.key)} due to lock delay")
        if op.session not in self.store.sessions:
            raise ValueError(f"invalid session {q(op.session)}")
        if existing is None:
            return KVEntry(op.key, op.value, op.flags, 1, op.session, self.index, self.index)
        if existing.session and existing.session != op.session:
            raise ValueError(f"failed to lock key {q(op.key)}, lock is already held")
        lock_index = existing.lock_index + (0 if existing.session == op.session else 1)
        return replace(
            existing,
            value=op.value,
            flags=op.flags,
            session=op.session,
            lock_index=lock_index,
            modify_index=self.index,
        )

    def _put(self, entry: KVEntry) -> dict[str, Any]:
        if self.table.entries.get(entry.key) is not entry:
            self.table.put(entry, self.index)
        return dir_entry_json(entry, with_value=False)


def _permitted(caller: Caller, op: KVOp, table: KVTable) -> bool:
    if op.verb == "delete-tree":
        return caller.can_write_prefix(op.key, [e.key for e in table.under(op.key)])
    if op.verb in WRITE_VERBS:
        return caller.can_write_key(op.key)
    if op.verb in CHECK_VERBS:
        return caller.can_read_key(op.key)
    return True  # reads are filtered on the way out


def run_kv_txn(store: ConsulStore, caller: Caller, ops: list[tuple[int, KVOp]]) -> TxnOutcome:
    """Apply `ops` (with their positions in the request) atomically; results keep request order."""
    with store.lock:
        writes = any(op.verb in WRITE_VERBS for _, op in ops)
        run = _Run(store, caller, store.kv.copy(), store.index + 1)
        results: list[tuple[int, dict[str, Any]]] = []
        errors: list[dict[str, Any]] = []
        for position, op in ops:
            if not _permitted(caller, op, run.table):
                errors.append({"OpIndex": position, "What": "Permission denied"})
                continue
            try:
                produced = run.apply(op)
            except ValueError as error:
                errors.append({"OpIndex": position, "What": str(error)})
                continue
            results.extend(
                (position, {"KV": r})
                for r in produced
                if op.verb not in READ_VERBS or caller.can_read_key(r["Key"])
            )
        if errors:
            return TxnOutcome([], errors)
        if writes:
            store.index = run.index
            store.kv = run.table
            store.notify()
        return TxnOutcome(results, [])
