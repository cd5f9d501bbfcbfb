"""The records the Consul stand-in keeps: KV entries and the KV table with its tombstones,
sessions, catalog services; and the error a failed write raises."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


class StoreError(Exception):
    """A failed write the real server reports as an error (HTTP 500), not as `false`."""


@dataclass(frozen=True)
class KVEntry:
    key: str
    value: bytes
    flags: int
    lock_index: int
    session: str
    create_index: int
    modify_index: int

    def same_content(self, other: KVEntry) -> bool:
        return (self.value, self.flags, self.session) == (other.value, other.flags, other.session)


@dataclass
class Session:
    id: str
    name: str
    node: str
    lock_delay_ns: int
    behavior: str  # "release" | "delete"
    ttl: str  # as given, "" for none
    ttl_ns: int
    node_checks: list[str]
    service_checks: list[Any] | None
    create_index: int
    modify_index: int
    timer: threading.Timer | None = field(default=None, repr=False)
    ttl_generation: int = 0


@dataclass
class CatalogService:
    id: str
    name: str
    node_id: str
    node_name: str
    address: str
    port: int
    tags: tuple[str, ...]
    meta: dict[str, str]
    check_status: str
    create_index: int
    modify_index: int
    check_modify_index: int


@dataclass
class KVTable:
    """The KV part of the state; copied whole by transactions so a rollback costs nothing."""

    entries: dict[str, KVEntry] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)
    table_index: int = 0

    def copy(self) -> KVTable:
        return KVTable(dict(self.entries), dict(self.tombstones), self.table_index)

    def under(self, prefix: str) -> list[KVEntry]:
        return [self.entries[k] for k in sorted(self.entries) if k.startswith(prefix)]

    def prefix_index(self, prefix: str) -> int:
        """X-Consul-Index of a recursive read: live entries and tombstones under the prefix."""
        if not prefix:
            return max(self.table_index, 1)
        best = max(
            (e.modify_index for e in self.entries.values() if e.key.startswith(prefix)), default=0
        )
        best = max(
            best, max((i for k, i in self.tombstones.items() if k.startswith(prefix)), default=0)
        )
        return best or max(self.table_index, 1)

    def put(self, entry: KVEntry, index: int) -> None:
        self.entries[entry.key] = entry
        self.tombstones.pop(entry.key, None)
        self.table_index = index

    def delete(self, key: str, index: int) -> bool:
        if key not in self.entries:
            return False
        del self.entries[key]
        self.tombstones[key] = index
        self.table_index = index
        return True
