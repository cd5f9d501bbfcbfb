"""The event stream (`GET /v1/event/stream`): NDJSON frames `{"Index": n, "Events": [...]}`,
a `{}` heartbeat on connect and every 30 s, topic filters `Topic:Key`, replay from `?index=`
out of a bounded buffer (the server's event_buffer_size, default 100)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

BUFFER_SIZE = 100
HEARTBEAT_S = 30.0


class EventLog:
    def __init__(self, size: int = BUFFER_SIZE) -> None:
        self._lock = threading.Lock()
        self._frames: deque[dict[str, Any]] = deque(maxlen=size)
        self._pending: list[dict[str, Any]] = []

    def emit(
        self, topic: str, kind: str, key: str, namespace: str, payload: Any, index: int
    ) -> None:
        """Queue an event; `flush` publishes the queued ones as one frame."""
        event = {
            "Topic": topic,
            "Type": kind,
            "Key": key,
            "Namespace": namespace,
            "FilterKeys": None,
            "Index": index,
            "Payload": {topic: payload},
        }
        with self._lock:
            self._pending.append(event)

    def flush(self) -> None:
        with self._lock:
            if not self._pending:
                return
            # One write, one Raft index: every event of the batch carries it.
            index = max(e["Index"] for e in self._pending)
            for event in self._pending:
                event["Index"] = index
            self._frames.append({"Index": index, "Events": self._pending})
            self._pending = []

    def since(
        self, index: int, topics: dict[str, set[str]], namespace: str
    ) -> list[dict[str, Any]]:
        """Frames after `index`, each cut down to the events the subscriber asked for."""
        with self._lock:
            frames = [f for f in self._frames if f["Index"] > index]
        result = []
        for frame in frames:
            events = [e for e in frame["Events"] if _wanted(e, topics, namespace)]
            if events:
                result.append({"Index": frame["Index"], "Events": events})
        return result

    def last_index(self) -> int:
        with self._lock:
            return self._frames[-1]["Index"] if self._frames else 0


def _wanted(event: dict[str, Any], topics: dict[str, set[str]], namespace: str) -> bool:
    if namespace != "*" and event["Namespace"] not in ("", namespace):
        return False
    for topic in (event["Topic"], "*"):
        keys = topics.get(topic)
        if keys is not None and ("*" in keys or event["Key"] in keys):
            return True
    return False


def parse_topics(values: list[str]) -> dict[str, set[str]]:
    """`?topic=Job:web&topic=Allocation` -> {"Job": {"web"}, "Allocation": {"*"}}."""
    topics: dict[str, set[str]] = {}
    for value in values or ["*:*"]:
        topic, _, key = value.partition(":")
        topics.setdefault(topic or "*", set()).add(key or "*")
    return topics
