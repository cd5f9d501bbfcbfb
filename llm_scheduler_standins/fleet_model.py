"""The machines the stand-ins pretend to run: what a Nomad client and the NVIDIA device plugin
would fingerprint on each.

The stand-ins own this description rather than borrowing the scheduler's snapshot model: they
play the servers the scheduler reads, and a change to how the scheduler models a node must not
change what the fake cluster reports. The field names follow the snapshot's node format, so a
snapshot's `nodes` load as a fleet (fields only the scheduler derives, such as `held` and
`draining`, are ignored). The stand-ins only read these attributes, so tests may also hand in
the scheduler's own `Node`s for a fleet.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

Amount = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]
MAX_PORT = 65535


class _Fleet(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class MigSlice(_Fleet):
    id: str
    profile: str
    memory_gb: Amount
    healthy: bool = True


class GPU(_Fleet):
    id: str
    model: str  # the NVML name, which names the device group
    memory_gb: Amount
    healthy: bool = True
    nvlink_peers: list[str] = Field(default_factory=list)
    # None: not in MIG mode. A list: in MIG mode, fingerprinted only as these slices.
    mig: list[MigSlice] | None = None


class HostVolume(_Fleet):
    """A client's `host_volume` (static: `id` empty) or a dynamic host volume (its UUID)."""

    path: str
    read_only: bool = False
    id: str = ""


class CachedWeights(_Fleet):
    """One complete snapshot in a node's stand-in model cache (the Hugging Face hub layout)."""

    source: str  # the repository, org/name
    revision: str = "main"
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] = "0" * 40
    bytes: Annotated[int, Field(ge=0, le=10**15)]
    last_used: Annotated[float, Field(ge=0, le=7_258_118_400)] = 0.0


class ModelCache(_Fleet):
    """What the node's model-cache host volume holds, and its room."""

    volume: str = "llm-model-cache"  # the host volume it lives on
    free_bytes: Annotated[int, Field(ge=0, le=10**15)] = 2 * 10**12
    weights: list[CachedWeights] = Field(default_factory=list)


def parse_ports(spec: str) -> set[int]:
    """A Nomad port list ("22,80,8000-8010", as `reserved_ports` in a client's `reserved`
    block) as the ports it names; ValueError names the part that is not one."""
    ports: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        low, _, high = part.partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            raise ValueError(f"{part!r} is not a port or a range of ports")
        first, last = int(low), int(high or low)
        if not 0 < first <= last <= MAX_PORT:
            raise ValueError(f"{part!r} is not a range of ports from 1 to {MAX_PORT}")
        ports.update(range(first, last + 1))
    return ports


class Reserved(_Fleet):
    """A Nomad client's `reserved` block: what the node keeps back from every placement. The
    server shows it as the node's ReservedResources and offers only the rest; the scheduler
    reads it from there."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu: int = Field(0, ge=0, le=10**9)  # MHz, as CpuShares
    memory: int = Field(0, ge=0, le=10**12)  # MB
    reserved_ports: str = ""  # host ports no allocation may take: "22,80,8000-8010"

    @field_validator("reserved_ports")
    @classmethod
    def _ports(cls, value: str) -> str:
        parse_ports(value)
        return value


class Node(_Fleet):
    id: str
    name: str
    pool: str = "default"
    datacenter: str = "dc1"
    eligible: bool = True
    cpu_cores: Amount
    memory_gb: Amount
    gpus: list[GPU] = Field(default_factory=list)
    meta: dict[str, str] = Field(default_factory=dict)  # the client's `meta` block
    # The client's host volumes by name. A snapshot lists the writable ones by name only, so
    # a list loads too (under /opt/<name>), and a dump gives that list back.
    host_volumes: dict[str, HostVolume] = Field(default_factory=dict)
    model_cache: ModelCache | None = None  # None: no stand-in cache on this node
    reserved: Reserved = Field(default_factory=Reserved)  # the client's `reserved` block

    @field_validator("host_volumes", mode="before")
    @classmethod
    def _names_as_volumes(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {str(name): {"path": f"/opt/{name}"} for name in value}
        return value

    @field_serializer("host_volumes")
    def _as_snapshot_names(self, volumes: dict[str, HostVolume]) -> list[str]:
        return sorted(name for name, v in volumes.items() if not v.read_only)

    @model_validator(mode="after")
    def _device_ids_once(self) -> Node:
        # The device plugin's instance ids are unique on a node; placement relies on it.
        ids = [i for g in self.gpus for i in (g.id, *(s.id for s in g.mig or []))]
        if len(ids) != len(set(ids)):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"device ids repeat on node {self.id!r}: {', '.join(repeated)}")
        return self
