"""What the Nomad stand-in needs from the Consul stand-in: a catalog to register services in.

Nomad registers a job's `service` blocks in Consul once the allocation runs, with the check
passing, and deregisters them when the allocation stops. Implementations must be thread-safe:
the Nomad stand-in calls them from its own thread and event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

CheckStatus = Literal["passing", "warning", "critical"]


@dataclass(frozen=True)
class ServiceInstance:
    # Unique per registration; Nomad writes _nomad-task-<alloc id>-<task>-<service>-<port label>.
    id: str
    name: str
    node_id: str  # the Nomad node id; the Consul node name is the Nomad node name
    node_name: str
    address: str
    port: int
    tags: tuple[str, ...] = ()
    meta: dict[str, str] = field(default_factory=dict)
    check_status: CheckStatus = "passing"


class ServiceRegistry(Protocol):
    def register_service(self, instance: ServiceInstance) -> None: ...

    def set_check_status(self, service_id: str, status: CheckStatus) -> None: ...

    def deregister_service(self, service_id: str) -> None: ...
