"""The fleet as the snapshot describes it: nodes, their GPUs and MIG slices (machine-written,
so unknown fields are ignored: newer adapters may add data)."""

from __future__ import annotations

from pydantic import Field, model_validator

from scheduler.core.contract_base import Lenient, NonNegFloat


class MigSlice(Lenient):
    id: str
    profile: str
    memory_gb: NonNegFloat
    healthy: bool = True


class GPU(Lenient):
    id: str
    model: str
    memory_gb: NonNegFloat
    healthy: bool = True
    nvlink_peers: list[str] = Field(default_factory=list)
    # None: not in MIG mode. A list (possibly empty): in MIG mode, offered only as these slices.
    mig: list[MigSlice] | None = None


class Node(Lenient):
    id: str
    name: str
    # The node's own IP (Nomad attribute unique.network.ip-address): where the other shards of
    # a multi-node replica reach its head shard. Empty when unknown.
    address: str = ""
    pool: str = "default"
    datacenter: str = "dc1"
    eligible: bool = True
    cpu_cores: NonNegFloat
    memory_gb: NonNegFloat
    gpus: list[GPU] = Field(default_factory=list)
    # Device ids held by allocations that are not the scheduler's replicas (other jobs, other
    # namespaces): taken, as a replica's are. Their CPU and memory, and the node's reserved
    # resources, are already left out of cpu_cores and memory_gb by the adapter.
    held: list[str] = Field(default_factory=list)
    # Being drained: ineligible for anything new, and its replicas are moved elsewhere
    # (make-before-break) where room allows.
    draining: bool = False
    # The Nomad node's Meta: the topology group of settings.topology_key is read from it.
    meta: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_device_ids(self) -> Node:
        seen: set[str] = set()
        for gpu in self.gpus:
            for dev_id in [gpu.id, *(s.id for s in gpu.mig or [])]:
                if dev_id in seen:
                    raise ValueError(f"device id {dev_id!r} appears twice on node {self.id!r}")
                seen.add(dev_id)
        return self
