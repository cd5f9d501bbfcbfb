"""Leader election with a Consul session and `kv.put(key, acquire=session)` (Consul's recipe).

The session has a TTL and behavior=release, renewed at a third of the TTL. A standby blocks
on the leader key and tries to acquire as soon as the key has no session. Stopping destroys
the session, which releases the lock at once.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable

import structlog

from scheduler.adapters.consul_kv import CONSUL_ERRORS, ConsulClient
from scheduler.service.watch import Backoff, next_index

log = structlog.get_logger("llm-scheduler.leader")


class LeaderElection:
    def __init__(
        self,
        consul_client: ConsulClient,
        key: str,
        *,
        ttl_s: int = 15,
        lock_delay_s: int = 15,
        on_change: Callable[[bool], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.consul = consul_client
        self.key = key
        self.ttl_s = ttl_s
        self.lock_delay_s = lock_delay_s
        self.on_change = on_change
        self.backoff = backoff or Backoff()
        self.identity = json.dumps({"host": socket.gethostname(), "id": id(self)})
        self.session: str | None = None
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def _set(self, leader: bool) -> None:
        if leader != self._leader.is_set():
            (self._leader.set if leader else self._leader.clear)()
            log.info("leadership", leader=leader, session=self.session, key=self.key)
            if self.on_change:
                self.on_change(leader)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._set(False)
        if self.session:
            try:
                self.consul.session.destroy(self.session)
            except CONSUL_ERRORS as exc:
                log.warning("session_destroy_failed", error=str(exc))
            self.session = None
        if self._thread:
            self._thread.join(timeout=5)

    def acquire_once(self) -> bool:
        """Try the lock once, without the renewing thread (`run --once`); `stop()` releases it."""
        try:
            self._set(self._acquire())
        except CONSUL_ERRORS as exc:
            log.warning("leader_acquire_failed", error=f"{type(exc).__name__}: {exc}")
            self._set(False)
        return self.is_leader

    def _acquire(self) -> bool:
        if self.session is None:
            self.session = self.consul.session.create(
                name="llm-scheduler",
                checks=[],
                behavior="release",
                ttl=self.ttl_s,
                lock_delay=self.lock_delay_s,
            )
        if not self.session:
            return False  # never a plain put: that would "win" without a lock
        return bool(self.consul.kv.put(self.key, self.identity, acquire=self.session))

    def _run(self) -> None:
        index = 0
        wait_s = max(self.ttl_s / 3, 1)
        while not self._stop.is_set():
            try:
                if not self.is_leader:
                    self._set(self._acquire())
                else:
                    self.consul.session.renew(self.session)
                kwargs = {}
                if index > 0:
                    kwargs = {"index": index, "wait": f"{int(wait_s)}s"}
                new_index, entry = self.consul.kv.get(self.key, **kwargs)
                index = next_index(index, int(new_index or 0))
                holder = (entry or {}).get("Session")
                if self.is_leader and holder != self.session:
                    self._set(False)
                self.backoff.reset()
            except CONSUL_ERRORS as exc:
                # The session may be gone (TTL missed, Consul restarted): start over.
                log.warning("leader_loop_error", error=f"{type(exc).__name__}: {exc}")
                if "not found" in str(exc).lower() or "invalid session" in str(exc).lower():
                    self.session = None
                self._set(False)
                index = 0
                self._stop.wait(self.backoff.next())
