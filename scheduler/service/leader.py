"""Leader election with a Consul session and `kv.put(key, acquire=session)` (Consul's recipe).

The session has a TTL and behavior=release. Leader and standby both renew it every loop (at
most a third of the TTL apart), so a standby keeps one session for its whole life instead of
letting it expire and recreating it. A standby blocks on the leader key and tries to acquire
as soon as the key has no session, retrying shortly while the lock-delay holds.

Stopping releases the lock key first and then destroys the session, as Consul's own lock does
(hashicorp/consul api/lock.go, Unlock: `kv.Release`, then the renew loop's `session.Destroy`).
A release arms no lock-delay, so a planned restart hands over at once; only a session that
is invalidated (destroyed while holding the lock, or its TTL missed after a crash) makes the
standby wait the lock-delay (state/session.go).
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
        self.retry_s = min(1.0, max(lock_delay_s / 4, 0.1))
        self.session: str | None = None
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._acquiring = threading.Lock()
        self._thread: threading.Thread | None = None
        self._standby_said = False

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def _set(self, leader: bool) -> None:
        if leader != self._leader.is_set():
            (self._leader.set if leader else self._leader.clear)()
            log.info("leadership", leader=leader, session=self.session, key=self.key)
            if self.on_change:
                self.on_change(leader)

    def _say_standby(self, holder: str | None) -> None:
        """One line when this instance starts waiting: an operator sees it is up and why it
        does nothing. It is said again after each spell as leader."""
        if self.is_leader:
            self._standby_said = False
        elif not self._standby_said:
            self._standby_said = True
            log.info("standby", key=self.key, held_by_session=holder or "nobody (lock-delay)")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Hand over: stop acting, release the key, then destroy the session. The caller has
        finished its own work (passes, actuation) before this."""
        with self._acquiring:  # no acquire slips in between
            self._stop.set()
            was_leader = self.is_leader
            self._set(False)
            session = self.session
            if session and was_leader:
                try:
                    self.consul.kv.put(self.key, self.identity, release=session)
                except CONSUL_ERRORS as exc:
                    log.warning("lock_release_failed", error=str(exc))
        if self._thread:
            self._thread.join(timeout=5)  # the release woke its blocking read
        self.session = None
        if not session:
            return
        try:
            self.consul.session.destroy(session)
        except CONSUL_ERRORS as exc:
            log.warning("session_destroy_failed", error=str(exc))

    def acquire_once(self) -> bool:
        """Try the lock once, without the renewing thread (`run --once`); `stop()` releases it."""
        try:
            self._set(self._acquire(self._session()))
        except CONSUL_ERRORS as exc:
            log.warning("leader_acquire_failed", error=f"{type(exc).__name__}: {exc}")
            self._set(False)
        return self.is_leader

    def _session(self) -> str | None:
        """This instance's session: renewed when it has one, created when it has none."""
        if self.session is not None:
            try:
                self.consul.session.renew(self.session)
                return self.session
            except CONSUL_ERRORS as exc:
                if "not found" not in str(exc).lower():
                    raise
                # Gone (Consul restarted, or a TTL missed while this process was stalled).
                log.info("session_expired", session=self.session)
                self.session = None
                self._set(False)
        self.session = self.consul.session.create(
            name="llm-scheduler",
            checks=[],
            behavior="release",
            ttl=self.ttl_s,
            lock_delay=self.lock_delay_s,
        )
        return self.session

    def _acquire(self, session: str | None) -> bool:
        if not session:
            return False  # never a plain put: that would "win" without a lock
        return bool(self.consul.kv.put(self.key, self.identity, acquire=session))

    def _run(self) -> None:
        index = 0
        wait_s = max(self.ttl_s / 3, 1)
        while not self._stop.is_set():
            try:
                session = self._session()
                with self._acquiring:
                    if not self.is_leader and not self._stop.is_set():
                        self._set(self._acquire(session))
                kwargs = {}
                if index > 0:
                    kwargs = {"index": index, "wait": f"{int(wait_s)}s"}
                new_index, entry = self.consul.kv.get(self.key, **kwargs)
                index = next_index(index, int(new_index or 0))
                holder = (entry or {}).get("Session")
                if self.is_leader and holder != self.session:
                    self._set(False)
                self._say_standby(holder)
                self.backoff.reset()
                if not self.is_leader and not holder:
                    # Free but not ours (the lock-delay after a crash): retry soon rather
                    # than block until the key changes, which it may not do.
                    index = 0
                    self._stop.wait(self.retry_s)
            except CONSUL_ERRORS as exc:
                # The session may be gone (TTL missed, Consul restarted): start over.
                log.warning("leader_loop_error", error=f"{type(exc).__name__}: {exc}")
                if "not found" in str(exc).lower() or "invalid session" in str(exc).lower():
                    self.session = None
                self._set(False)
                index = 0
                self._stop.wait(self.backoff.next())
