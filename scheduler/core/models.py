"""The contract of the decision core: the snapshot that goes in, the plan that comes out.

Shapes follow DESIGN.md section 5. Field names there may not be renamed; fields may be added.
Operator- and gateway-written objects (models, quotas, demand, settings) forbid unknown
fields so a typo is reported rather than silently ignored; machine-written ones
(nodes, replicas) ignore them so newer adapters can add data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

ClassName = Literal["critical", "standard", "opportunistic"]
CLASS_RANK: dict[str, int] = {"opportunistic": 0, "standard": 1, "critical": 2}

# A model name becomes part of a Nomad job id and a Consul key: keep it to a safe alphabet.
NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$"
OWNER_PATTERN = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$"

# Bounds keep every value the core computes with finite: no NaN, no infinity, no float overflow
# from a huge count divided by a tiny target, no timedelta overflow from a huge duration.
MAX_AMOUNT = 1e9
MAX_COUNT = 10**9
MAX_DURATION_S = 30 * 86400
NonNegFloat = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Duration = Annotated[int, Field(ge=0, le=MAX_DURATION_S)]


def check_owner(owner: str) -> str:
    """An owner path with no empty, `.` or `..` segment (it is also a Consul key's tail)."""
    if any(part in (".", "..") for part in owner.split("/")):
        raise ValueError(f"owner path {owner!r} has a '.' or '..' segment")
    return owner


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Amount(Strict):
    """An amount of resources. A missing dimension means: not governed (for a limit) or zero."""

    gpus: NonNegFloat | None = None
    cpu_cores: NonNegFloat | None = None
    memory_gb: NonNegFloat | None = None


class Settings(Strict):
    eviction_grace_s: Duration = 300
    min_lifetime_s: Duration = 600
    preempt_hold_s: Duration = 300
    max_victims: Annotated[int, Field(ge=0, le=64)] = 3
    # How long the replicas of a model whose key was deleted stay before they are stopped
    # (a key deleted by mistake can be put back in that time).
    retire_grace_s: Duration = 600


# ---------------------------------------------------------------- fleet


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
    pool: str = "default"
    datacenter: str = "dc1"
    eligible: bool = True
    cpu_cores: NonNegFloat
    memory_gb: NonNegFloat
    gpus: list[GPU] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_device_ids(self) -> Node:
        seen: set[str] = set()
        for gpu in self.gpus:
            for dev_id in [gpu.id, *(s.id for s in gpu.mig or [])]:
                if dev_id in seen:
                    raise ValueError(f"device id {dev_id!r} appears twice on node {self.id!r}")
                seen.add(dev_id)
        return self


# ---------------------------------------------------------------- catalog


class Scaling(Strict):
    min: Annotated[int, Field(ge=0, le=100_000)] = 0
    max: Annotated[int, Field(ge=0, le=100_000)] = 1
    target_per_replica: Annotated[float, Field(ge=0.001, le=MAX_AMOUNT, allow_inf_nan=False)] = 16
    on_demand: bool = False

    @model_validator(mode="after")
    def _min_le_max(self) -> Scaling:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class Profile(Strict):
    """One way to run a replica: whole GPUs per shard on `shards` nodes, or one MIG slice."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    gpus: Annotated[int, Field(ge=1, le=64)] = 1
    shards: Annotated[int, Field(ge=1, le=64)] = 1
    gpu_memory_gb: NonNegFloat | None = None
    gpu_models: list[str] | None = None
    mig_profile: str | None = None
    # CPU and memory are per shard.
    cpu_cores: NonNegFloat = 0
    memory_gb: NonNegFloat = 0

    @model_validator(mode="after")
    def _mig_is_single(self) -> Profile:
        if self.mig_profile is not None and (self.gpus != 1 or self.shards != 1):
            raise ValueError(
                "a mig_profile profile takes exactly one slice: gpus and shards must be 1"
            )
        return self

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None


class Model(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    owner: Annotated[str, Field(pattern=OWNER_PATTERN, max_length=256)]
    class_: ClassName = Field("standard", alias="class")
    scaling: Scaling = Field(default_factory=Scaling)
    profiles: Annotated[list[Profile], Field(min_length=1)]
    # Which job template renders its replicas (jobspecs/<runtime>.nomad.hcl) and the values it gets.
    runtime: Annotated[str, Field(pattern=r"^[a-z0-9_-]+$")] = "vllm"
    params: dict[str, str] = Field(default_factory=dict)
    # How long a replica may take from registration to passing its readiness check (weights
    # download, load, compile). Sizes the job's health-check grace and the starting time-out.
    load_grace_s: Annotated[int, Field(ge=30, le=86400)] = 1800

    _owner = field_validator("owner")(check_owner)

    @field_validator("profiles")
    @classmethod
    def _unique_profile_names(cls, profiles: list[Profile]) -> list[Profile]:
        names = [p.name for p in profiles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"profile names must be unique, repeated: {', '.join(dupes)}")
        return profiles

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)


class Quota(Strict):
    owner: Annotated[str, Field(pattern=OWNER_PATTERN, max_length=256)]
    guarantee: Amount = Field(default_factory=Amount)
    limit: Amount | None = None

    _owner = field_validator("owner")(check_owner)


class Demand(Strict):
    inflight: Count = 0
    queued: Count = 0
    last_used: AwareDatetime | None = None


# ---------------------------------------------------------------- running state


class Shard(Lenient):
    node: str
    gpus: list[str] = Field(default_factory=list)


class Replica(Lenient):
    id: str
    model: str
    profile: str
    state: Literal["starting", "running", "stopping"]
    created_at: AwareDatetime
    ready_at: AwareDatetime | None = None
    last_used_at: AwareDatetime | None = None
    preempted_for: str | None = None
    shards: list[Shard] = Field(default_factory=list)

    @property
    def counts(self) -> bool:
        """A stopping replica no longer counts as live."""
        return self.state != "stopping"


class Hold(Strict):
    until: AwareDatetime
    for_: str = Field(alias="for")


class Snapshot(Lenient):
    now: AwareDatetime
    settings: Settings = Field(default_factory=Settings)
    nodes: list[Node] = Field(default_factory=list)
    models: list[Model] = Field(default_factory=list)
    quotas: list[Quota] = Field(default_factory=list)
    demand: dict[str, Demand] = Field(default_factory=dict)
    replicas: list[Replica] = Field(default_factory=list)
    holds: dict[str, Hold] = Field(default_factory=dict)
    # Models whose key was deleted while replicas of theirs run: name -> when it went missing
    # (the adapter lists one only after a complete catalog read). Their replicas stop once
    # settings.retire_grace_s has passed; a replica of a model neither here nor in `models`
    # is left alone (unknown is never a reason to stop).
    retired: dict[str, AwareDatetime] = Field(default_factory=dict)


# ---------------------------------------------------------------- plan


class StopAction(Strict):
    op: Literal["stop"] = "stop"
    replica: str
    model: str
    reason: str
    preempted_for: str | None = None


class StartAction(Strict):
    op: Literal["start"] = "start"
    model: str
    profile: str
    replica: str
    shards: list[Shard]
    reason: str


Action = Annotated[StartAction | StopAction, Field(discriminator="op")]


class ProfileTrial(Strict):
    """What placing one profile ran into: a filter's name and on how many nodes it said no."""

    profile: str
    short: dict[str, int] = Field(default_factory=dict)
    note: str | None = None


class ModelStatus(Strict):
    desired: int
    live: int
    pending: str | None = None
    tried: list[ProfileTrial] = Field(default_factory=list)


class Plan(Strict):
    actions: list[Action] = Field(default_factory=list)
    models: dict[str, ModelStatus] = Field(default_factory=dict)
    holds: dict[str, Hold] = Field(default_factory=dict)
    # Advice for operators, e.g. which drained MIG GPU to re-partition (issue 6).
    advice: list[str] = Field(default_factory=list)


def to_json(model: BaseModel) -> str:
    """Canonical JSON: aliases, no None-pruning surprises, stable key order from the models."""
    return model.model_dump_json(by_alias=True, indent=2)


def rfc3339(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")
