"""The fleet as the snapshot describes it: nodes, their GPUs and MIG slices, the replicas
running on them and the room kept for replicas to come (machine-written, so unknown fields
are ignored: newer adapters may add data). Pydantic dataclasses, frozen and with slots
(contract_base.Record: the pass reads them most), but the reservation (read once a pass)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from scheduler.core.contract_base import (
    LENIENT_RECORD,
    Amount,
    Lenient,
    NonNegFloat,
    Record,
    Timestamp,
)


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class MigSlice(Record):
    id: str
    profile: str
    memory_gb: NonNegFloat
    healthy: bool = True


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class GPU(Record):
    id: str
    model: str
    memory_gb: NonNegFloat
    healthy: bool = True
    nvlink_peers: list[str] = Field(default_factory=list)
    # None: not in MIG mode. A list (possibly empty): in MIG mode, offered only as these slices.
    mig: list[MigSlice] | None = None


# Bytes on one node's disk: up to a petabyte.
Bytes = Annotated[int, Field(ge=0, le=10**15, strict=True)]


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class CachedSnapshot(Record):
    """A complete repository snapshot in the node's model cache (Hugging Face hub layout)."""

    source: str  # the repository, as a model's serve.source names it
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
    revisions: list[str] = Field(default_factory=list)  # the refs that point at it
    bytes: Bytes = 0
    # The safetensors index's metadata.total_size, when the snapshot has one.
    weights_bytes: Bytes | None = None
    last_used: Timestamp | None = None

    def matches(self, revision: str | None) -> bool:
        """Whether this is the snapshot of `revision` (a ref such as a branch or tag, or a
        commit; None: the hub's default, `main`)."""
        wanted = revision or "main"
        return wanted == self.commit or wanted in self.revisions


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class NodeCache(Record):
    """What the node's model-cache host volume holds, from its reporter."""

    volume: str
    free_bytes: Bytes | None = None
    snapshots: list[CachedSnapshot] = Field(default_factory=list)

    def holds(self, source: str, revision: str | None) -> bool:
        """Whether a complete snapshot of `source` at `revision` (a ref such as a branch or
        tag, or a commit; None: the hub's default, `main`) is here."""
        return any(s.source == source and s.matches(revision) for s in self.snapshots)


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class Node(Record):
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
    # The names of the host volumes the Nomad node advertises (Node.HostVolumes).
    host_volumes: list[str] = Field(default_factory=list)
    # Its model cache as last reported; None: cold (no volume, no report, or a bad one).
    cache: NodeCache | None = None

    @model_validator(mode="after")
    def _unique_device_ids(self) -> Node:
        seen: set[str] = set()
        for gpu in self.gpus:
            for dev_id in [gpu.id, *(s.id for s in gpu.mig or [])]:
                if dev_id in seen:
                    raise ValueError(f"device id {dev_id!r} appears twice on node {self.id!r}")
                seen.add(dev_id)
        return self


# ---------------------------------------------------------------- running state


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class Shard(Record):
    node: str
    gpus: list[str] = Field(default_factory=list)
    # What the allocation holds on its node, when the adapter knows it; unset: what the
    # replica's profile asks (or, for a profile no longer in the model, the most any asks).
    cpu_cores: NonNegFloat | None = None
    memory_gb: NonNegFloat | None = None


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class Replica(Record):
    id: str
    model: str
    profile: str
    state: Literal["starting", "running", "stopping"]
    created_at: Timestamp
    ready_at: Timestamp | None = None
    last_used_at: Timestamp | None = None
    preempted_for: str | None = None
    shards: list[Shard] = Field(default_factory=list)
    # Digest of what the replica runs (serve spec, profile, load grace), from its job's Meta;
    # empty when unknown (a job written before digests): such a replica is never rolled.
    spec: str = ""

    @property
    def counts(self) -> bool:
        """A stopping replica no longer counts as live."""
        return self.state != "stopping"


class Reservation(Lenient):
    """Room preemption freed for one replica of a model (rule R5): no other model's start may
    use it. `shards` are where the replica would go (devices by id, with the CPU and memory
    each shard asks), `quota` what it counts against its owner's quota. Kept while the
    victims stop, until `until` (`preempt_hold_s` after `since`, when they were preempted),
    and for the first pass after the victims are gone; released earlier once the model
    starts there or no longer needs it."""

    since: Timestamp
    until: Timestamp
    shards: list[Shard] = Field(default_factory=list)
    quota: Amount = Field(default_factory=Amount)
