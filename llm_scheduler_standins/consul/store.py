"""In-memory Consul state: one raft-like index, KV entries with tombstones, sessions, catalog.

Models hashicorp/consul agent/consul/state (kvs.go, session.go): every write advances one
global index; the KV table index includes tombstones so a delete raises the index of a
recursive watch; sessions hold locks and release or delete them when invalidated. All
methods are thread-safe (one re-entrant lock); waiters on any event loop are woken through
`loop.call_soon_threadsafe` after every change.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from llm_scheduler_standins.consul.durations import SECOND_NS
from llm_scheduler_standins.consul.tables import (
    CatalogService,
    KVEntry,
    KVTable,
    Session,
    StoreError,
)

MAX_LOCK_DELAY_NS = 60 * SECOND_NS


_Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class ConsulStore:
    def __init__(
        self, *, session_ttl_multiplier: float = 2.0, agent_node: str = "consul-standin"
    ) -> None:
        self.lock = threading.RLock()
        self.index = 1  # a fresh store answers 1; data never gets index 1
        self.kv = KVTable()
        self.sessions: dict[str, Session] = {}
        self.session_table_index = 0
        self.services: dict[str, CatalogService] = {}
        self.catalog_index = 0
        self.lock_delays: dict[str, float] = {}  # key -> monotonic expiry
        self.generation = 0  # bumped on index reset; blocked queries then return at once
        self.session_ttl_multiplier = session_ttl_multiplier
        self.agent_node = agent_node
        # Catalog nodes besides those of registered services: the agent registers itself.
        self.extra_nodes: set[str] = {agent_node}
        self._waiters: dict[int, _Waiter] = {}
        self._waiters_lock = threading.Lock()
        self._next_waiter = 0

    # -- change notification -------------------------------------------------------------

    def add_waiter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> int:
        with self._waiters_lock:
            self._next_waiter += 1
            self._waiters[self._next_waiter] = (loop, event)
            return self._next_waiter

    def remove_waiter(self, token: int) -> None:
        with self._waiters_lock:
            self._waiters.pop(token, None)

    def notify(self) -> None:
        with self._waiters_lock:
            waiters = list(self._waiters.values())
        for loop, event in waiters:
            # A closed loop raises RuntimeError: its waiter is gone anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def next_index(self) -> int:
        self.index += 1
        return self.index

    # -- KV ------------------------------------------------------------------------------

    def lock_delayed(self, key: str) -> bool:
        expiry = self.lock_delays.get(key)
        if expiry is None:
            return False
        if time.monotonic() >= expiry:
            del self.lock_delays[key]
            return False
        return True

    def kv_set(self, key: str, value: bytes, flags: int = 0) -> bool:
        """Plain set: keeps an existing lock (Session, LockIndex), stores the given Flags."""
        with self.lock:
            index = self.index + 1
            existing = self.kv.entries.get(key)
            if existing is None:
                entry = KVEntry(key, value, flags, 0, "", index, index)
            else:
                entry = replace(existing, value=value, flags=flags, modify_index=index)
                if existing.same_content(entry):
                    return True  # an idempotent write does not bump ModifyIndex
            self.index = index
            self.kv.put(entry, index)
            self.notify()
            return True

    def kv_cas(self, key: str, value: bytes, flags: int, cas: int) -> bool:
        with self.lock:
            existing = self.kv.entries.get(key)
            if cas == 0 and existing is not None:
                return False
            if cas != 0 and (existing is None or existing.modify_index != cas):
                return False
            return self.kv_set(key, value, flags)

    def kv_acquire(self, key: str, value: bytes, flags: int, session_id: str) -> bool:
        """`?acquire=`: StoreError for an unknown session, False when held or lock-delayed."""
        with self.lock:
            target = self.kv
            if session_id not in self.sessions:
                raise StoreError(f'invalid session "{session_id}"')
            if self.lock_delayed(key):
                return False
            index = self.index + 1
            existing = target.entries.get(key)
            if existing is None:
                entry = KVEntry(key, value, flags, 1, session_id, index, index)
            elif existing.session == session_id:
                entry = replace(existing, value=value, flags=flags, modify_index=index)
            elif existing.session:
                return False
            else:
                entry = replace(
                    existing,
                    value=value,
                    flags=flags,
                    session=session_id,
                    lock_index=existing.lock_index + 1,
                    modify_index=index,
                )
            target.put(entry, index)
            self.index = index
            self.notify()
            return True

    def kv_release(self, key: str, value: bytes, flags: int, session_id: str) -> bool:
        with self.lock:
            target = self.kv
            existing = target.entries.get(key)
            if existing is None or existing.session != session_id:
                return False
            index = self.index + 1
            entry = replace(existing, value=value, flags=flags, session="", modify_index=index)
            target.put(entry, index)
            self.index = index
            self.notify()
            return True

    def kv_delete(self, key: str, *, recurse: bool = False, cas: int | None = None) -> bool:
        with self.lock:
            if cas is not None:
                existing = self.kv.entries.get(key)
                if existing is None:
                    return True  # delete-cas on a missing key succeeds (state/kvs.go)
                if existing.modify_index != cas:
                    return False
            keys = [e.key for e in self.kv.under(key)] if recurse else [key]
            keys = [k for k in keys if k in self.kv.entries]
            if not keys:
                return True
            index = self.next_index()
            for k in keys:
                self.kv.delete(k, index)
            self.notify()
            return True

    # -- sessions ------------------------------------------------------------------------

    def create_session(
        self,
        *,
        name: str,
        node: str,
        lock_delay_ns: int,
        behavior: str,
        ttl: str,
        ttl_ns: int,
        node_checks: list[str],
        service_checks: list[Any] | None = None,
    ) -> Session:
        with self.lock:
            index = self.next_index()
            session = Session(
                str(uuid.uuid4()),
                name,
                node,
                lock_delay_ns,
                behavior,
                ttl,
                ttl_ns,
                node_checks,
                service_checks,
                index,
                index,
            )
            self.sessions[session.id] = session
            self.session_table_index = index
            self._arm_ttl(session)
            self.notify()
            return session

    def renew_session(self, session_id: str) -> Session | None:
        with self.lock:
            session = self.sessions.get(session_id)
            if session is not None:
                self._arm_ttl(session)
            return session

    def _arm_ttl(self, session: Session) -> None:
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        if session.ttl_ns <= 0:
            return
        session.ttl_generation += 1
        delay = session.ttl_ns / SECOND_NS * self.session_ttl_multiplier
        timer = threading.Timer(delay, self._expire, args=(session.id, session.ttl_generation))
        timer.daemon = True
        session.timer = timer
        timer.start()

    def _expire(self, session_id: str, ttl_generation: int) -> None:
        with self.lock:
            session = self.sessions.get(session_id)
            # A renew re-armed the timer after this one fired: this firing is stale.
            if session is None or session.ttl_generation != ttl_generation:
                return
            self.invalidate_session(session_id)

    def invalidate_session(self, session_id: str) -> bool:
        """Destroy a session and release or delete its locks, arming their lock-delay."""
        with self.lock:
            session = self.sessions.pop(session_id, None)
            if session is None:
                return False
            if session.timer is not None:
                session.timer.cancel()
            index = self.next_index()
            delay_s = min(session.lock_delay_ns, MAX_LOCK_DELAY_NS) / SECOND_NS
            for entry in [e for e in self.kv.entries.values() if e.session == session_id]:
                if session.behavior == "delete":
                    self.kv.delete(entry.key, index)
                else:
                    self.kv.put(replace(entry, session="", modify_index=index), index)
                if delay_s > 0:
                    self.lock_delays[entry.key] = time.monotonic() + delay_s
            self.session_table_index = index
            self.notify()
            return True

    def sessions_sorted(self, node: str | None = None) -> list[Session]:
        with self.lock:
            found = sorted(self.sessions.values(), key=lambda s: s.create_index)
            return [s for s in found if node is None or s.node == node]

    def close(self) -> None:
        with self.lock:
            for session in self.sessions.values():
                if session.timer is not None:
                    session.timer.cancel()

    # -- catalog -------------------------------------------------------------------------

    def node_registered(self, name: str) -> bool:
        with self.lock:
            return name in self.extra_nodes or any(
                s.node_name == name for s in self.services.values()
            )

    def register_service(self, service: CatalogService) -> None:
        with self.lock:
            index = self.next_index()
            previous = self.services.get(service.id)
            service.create_index = previous.create_index if previous else index
            service.modify_index = index
            service.check_modify_index = index
            self.services[service.id] = service
            self.catalog_index = index
            self.notify()

    def set_check_status(self, service_id: str, status: str) -> None:
        with self.lock:
            service = self.services.get(service_id)
            if service is None:
                raise KeyError(f"no service registered with id {service_id!r}")
            if service.check_status == status:
                return
            index = self.next_index()
            service.check_status = status
            service.check_modify_index = index
            self.catalog_index = index
            if status == "critical":
                # A session bound to a critical check is invalidated (docs/automate/session.mdx).
                for session in list(self.sessions.values()):
                    if f"service:{service_id}" in session.node_checks:
                        self.invalidate_session(session.id)
            self.notify()

    def deregister_service(self, service_id: str) -> None:
        with self.lock:
            if self.services.pop(service_id, None) is None:
                return
            index = self.next_index()
            self.catalog_index = index
            for session in list(self.sessions.values()):
                if f"service:{service_id}" in session.node_checks:
                    self.invalidate_session(session.id)
            self.notify()

    # -- faults --------------------------------------------------------------------------

    def reset_index(self) -> None:
        """Renumber everything from a low index, as after restoring an older raft snapshot.

        Blocked queries return at once (the real server abandons them on restore) and every
        client sees an X-Consul-Index lower than the one it last had.
        """
        with self.lock:
            counter = iter(range(2, 1 << 62))
            mapping: dict[int, int] = {}

            def renumber(old: int) -> int:
                if old not in mapping:
                    mapping[old] = next(counter)
                return mapping[old]

            olds: set[int] = {e.create_index for e in self.kv.entries.values()}
            olds |= {e.modify_index for e in self.kv.entries.values()}
            olds |= {s.create_index for s in self.sessions.values()}
            olds |= {s.modify_index for s in self.sessions.values()}
            for service in self.services.values():
                olds |= {service.create_index, service.modify_index, service.check_modify_index}
            for old in sorted(olds):
                renumber(old)
            self.kv = KVTable(
                {
                    k: replace(
                        e,
                        create_index=renumber(e.create_index),
                        modify_index=renumber(e.modify_index),
                    )
                    for k, e in self.kv.entries.items()
                },
                {},
                0,
            )
            self.kv.table_index = max((e.modify_index for e in self.kv.entries.values()), default=0)
            for session in self.sessions.values():
                session.create_index = renumber(session.create_index)
                session.modify_index = renumber(session.modify_index)
            for service in self.services.values():
                service.create_index = renumber(service.create_index)
                service.modify_index = renumber(service.modify_index)
                service.check_modify_index = renumber(service.check_modify_index)
            self.session_table_index = max(
                (s.modify_index for s in self.sessions.values()), default=0
            )
            self.catalog_index = max(
                (max(s.modify_index, s.check_modify_index) for s in self.services.values()),
                default=0,
            )
            self.index = max(mapping.values(), default=1)
            self.generation += 1
            self.notify()

    def reap_tombstones(self, keys: Iterable[str] | None = None) -> None:
        """Drop tombstones (Consul reaps them after 15 min); the prefix index can then go down."""
        with self.lock:
            for key in list(self.kv.tombstones if keys is None else keys):
                self.kv.tombstones.pop(key, None)
