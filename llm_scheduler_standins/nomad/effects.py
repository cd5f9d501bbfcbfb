"""What a change to the cluster does besides changing its tables: Consul registrations, and
timers (an allocation starting or stopping after its delay, a drain's deadline). They are
collected under the lock and applied before it is released (Cluster._apply)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llm_scheduler_standins.registry import ServiceInstance


@dataclass
class Effects:
    register: list[ServiceInstance] = field(default_factory=list)
    deregister: list[str] = field(default_factory=list)
    start_later: list[str] = field(default_factory=list)
    finish_later: list[str] = field(default_factory=list)
    drain_deadlines: list[tuple[str, float]] = field(default_factory=list)  # node id, seconds
    timers: list[tuple[str, float, Callable[[str], None]]] = field(default_factory=list)

    def merge(self, other: Effects) -> None:
        self.register += other.register
        self.deregister += other.deregister
        self.start_later += other.start_later
        self.finish_later += other.finish_later
        self.drain_deadlines += other.drain_deadlines
        self.timers += other.timers
