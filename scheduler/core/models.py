"""The contract of the decision core: the snapshot that goes in, the plan that comes out.

Shapes follow docs/decision-core.md, "The contract": fields may be added, never renamed.
Operator- and gateway-written objects (models, quotas, demand, settings) forbid unknown
fields so a typo is reported rather than silently ignored; machine-written ones
(nodes, replicas) ignore them so newer adapters can add data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from scheduler.core.contract_base import (
    CLASS_RANK,
    MAX_AMOUNT,
    MAX_COUNT,
    MAX_DURATION_S,
    NAME_PATTERN,
    OWNER_PATTERN,
    STRICT_RECORD,
    ActivationTimeout,
    Amount,
    ClassName,
    Count,
    Duration,
    GpuModelName,
    Lenient,
    MaxQueued,
    MigProfileName,
    NonNegFloat,
    Record,
    Strict,
    Timestamp,
    check_owner,
    mig_profile_problem,
)
from scheduler.core.fleet import GPU, MigSlice, Node, Replica, Reservation, Shard
from scheduler.core.plan_records import (
    Action,
    ModelStatus,
    ProfileTrial,
    StartAction,
    StopAction,
    StoppedReplica,
)
from scheduler.core.prefetch_records import Prefetch, PrefetchAction, PrefetchStatus
from scheduler.core.serve_spec import Serve

# Re-exported: the contract's names are imported from here.
__all__ = [
    "CLASS_RANK",
    "GPU",
    "MAX_AMOUNT",
    "MAX_COUNT",
    "MAX_DURATION_S",
    "NAME_PATTERN",
    "OWNER_PATTERN",
    "Amount",
    "ClassName",
    "Count",
    "Duration",
    "Lenient",
    "MigSlice",
    "ModelStatus",
    "Node",
    "NonNegFloat",
    "ProfileTrial",
    "Replica",
    "Reservation",
    "Shard",
    "StartAction",
    "StopAction",
    "StoppedReplica",
    "Strict",
    "Timestamp",
    "check_owner",
]


class Settings(Strict):
    eviction_grace_s: Duration = 300
    min_lifetime_s: Duration = 600
    preempt_hold_s: Duration = 300
    max_victims: Annotated[int, Field(strict=True, ge=0, le=64)] = 3
    # Rolling updates: replacements of a model started ahead of the replicas they replace
    # (make-before-break), at most this many at a time.
    rollout_surge: Annotated[int, Field(strict=True, ge=1, le=64)] = 1
    # Replicas moved per pass to a better profile (consolidation); 0 turns it off.
    consolidate_per_pass: Annotated[int, Field(strict=True, ge=0, le=64)] = 1
    # Cost of one GPU by GPU model name, matched by substring as gpu_models is (the longest
    # match wins); a GPU no key matches costs default_gpu_cost. Read by `placement: cheapest`.
    gpu_costs: dict[str, NonNegFloat] = Field(default_factory=dict)
    default_gpu_cost: NonNegFloat = 1.0
    # The Nomad node meta key that names a node's topology group (rack), for the locality
    # of multi-node replicas.
    topology_key: Annotated[str, Field(min_length=1, max_length=128)] = "rack"
    # Scale-down stabilisation: a model scales down only to the highest count it
    # wanted over this window (HPA's and AIBrix's default 300 s), at most this many replicas
    # per pass (0: no limit). Scale-up is never delayed. A model's scaling may override both.
    scale_down_window_s: Annotated[int, Field(strict=True, ge=0, le=86400)] = 300
    scale_down_step: Annotated[int, Field(strict=True, ge=0)] = 0
    # How long the replicas of a model whose key was deleted stay before they are stopped
    # (a key deleted by mistake can be put back in that time).
    retire_grace_s: Duration = 600
    # Rates that the expected time to ready assumes for a model until its starts were seen:
    # a cold start downloads the weights from the hub (10 Gbit/s link) then loads them
    # from local disk (16 Gbit/s, 2 GB/s); a warm one only loads them.
    download_gbps: Annotated[float, Field(strict=True, gt=0, le=10_000, allow_inf_nan=False)] = 10.0
    load_gbps: Annotated[float, Field(strict=True, gt=0, le=10_000, allow_inf_nan=False)] = 16.0
    # Prefetch jobs (a model's serve.prefetch) running in the fleet at once, at most.
    prefetch_max: Annotated[int, Field(strict=True, ge=0, le=64)] = 2
    # Decayed usage (rule F4): an owner who used much lately comes after the others for free
    # room and yields first toward fair share; its usage halves every this many seconds. 0: off.
    usage_half_life_s: Duration = 0


# ---------------------------------------------------------------- catalog


@dataclass(frozen=True, slots=True, kw_only=True, config=STRICT_RECORD)
class Scaling(Record):
    min: Annotated[int, Field(strict=True, ge=0, le=100_000)] = 0
    max: Annotated[int, Field(strict=True, ge=0, le=100_000)] = 1
    target_per_replica: Annotated[
        float, Field(strict=True, ge=0.001, le=MAX_AMOUNT, allow_inf_nan=False)
    ] = 16
    on_demand: Annotated[bool, Field(strict=True)] = False
    # Objectives on what the model servers report; each one set is a signal, and the
    # largest count any signal asks for wins. KV-cache usage per replica (0-1, llm-d's 0.80),
    # waiting requests per replica (llm-d's 5), TTFT and inter-token latency p90 (Dynamo's
    # 500 ms / 50 ms).
    kv_cache_target: Annotated[
        float | None, Field(strict=True, gt=0, le=1, allow_inf_nan=False)
    ] = None
    queue_per_replica: Annotated[float | None, Field(strict=True, gt=0, allow_inf_nan=False)] = None
    ttft_p90_ms: Annotated[float | None, Field(strict=True, gt=0, allow_inf_nan=False)] = None
    itl_p90_ms: Annotated[float | None, Field(strict=True, gt=0, allow_inf_nan=False)] = None
    # Per-model overrides of the settings of the same name.
    scale_down_window_s: Annotated[int | None, Field(strict=True, ge=0, le=86400)] = None
    scale_down_step: Annotated[int | None, Field(strict=True, ge=0)] = None

    @model_validator(mode="after")
    def _min_le_max(self) -> Scaling:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


@dataclass(frozen=True, slots=True, kw_only=True, config=STRICT_RECORD)
class Profile(Record):
    """One way to run a replica: whole GPUs per shard on `shards` nodes, or one MIG slice."""

    # A profile name goes into Nomad job Meta: the model names' safe alphabet.
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    gpus: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    shards: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    gpu_memory_gb: NonNegFloat | None = None
    gpu_models: list[GpuModelName] | None = None
    mig_profile: MigProfileName | None = None
    # CPU and memory are per shard.
    cpu_cores: NonNegFloat = 0
    memory_gb: NonNegFloat = 0
    # Multi-node replicas: shards in one datacenter, then in one topology group (node meta
    # settings.topology_key). `preferred` falls back to any nodes; `required` waits for them.
    locality: Literal["none", "preferred", "required"] = "preferred"

    @model_validator(mode="after")
    def _mig_is_single(self) -> Profile:
        if self.mig_profile is not None and (self.gpus != 1 or self.shards != 1):
            raise ValueError(
                "a mig_profile profile takes exactly one slice: gpus and shards must be 1"
            )
        return self

    @model_validator(mode="after")
    def _mig_profile_exists(self) -> Profile:
        # Else the model waits forever for a slice no GPU it may use can have.
        problem = mig_profile_problem(self.mig_profile, self.gpu_models)
        if problem is not None:
            raise ValueError(f"mig_profile: {problem}")
        return self

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None


# Fields Model had before `serve`, at their defaults: ignored so old snapshots still load.
OLD_DEFAULTS: tuple[tuple[str, object], ...] = (("params", {}), ("runtime", "vllm"))


@dataclass(frozen=True, slots=True, kw_only=True, config=STRICT_RECORD)
class Model(Record):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    owner: Annotated[str, Field(pattern=OWNER_PATTERN, max_length=256)]
    class_: ClassName = Field("standard", alias="class")
    scaling: Scaling = Field(default_factory=Scaling)
    profiles: Annotated[list[Profile], Field(min_length=1)]
    # What a replica serves and how (runtime, image, typed options). The decision core
    # reads only its source, revision, weights_gb and prefetch; the catalog requires it
    # (scheduler/serving/catalog_model.py).
    serve: Serve | None = None
    # How long a replica may take from registration to passing its readiness check (weights
    # download, load, compile). Sizes the job's health-check grace and the starting time-out.
    load_grace_s: Annotated[int, Field(strict=True, ge=30, le=86400)] = 1800
    # `preferred`: profiles in listed order. `cheapest`: among the profiles that fit, the one
    # whose GPUs cost least (settings.gpu_costs); listed order breaks ties.
    placement: Literal["preferred", "cheapest"] = "preferred"
    # Gateway: how long a request may be held while the model wakes from zero, and how many
    # may be held at once (None: the gateway's defaults, 600 s and 1000). Never decided on.
    activation_timeout_s: ActivationTimeout | None = None
    max_queued: MaxQueued | None = None

    @model_validator(mode="before")
    @classmethod
    def _replaced_fields(cls, data: object) -> object:
        # A catalog with the removed `params` is told what replaced it (`serve`); snapshots
        # carrying its old defaults (params {}, runtime "vllm") still load.
        if isinstance(data, dict):
            if data.get("params") == {} or data.get("runtime") == "vllm":
                data = {k: v for k, v in data.items() if (k, v) not in OLD_DEFAULTS}
            if "params" in data:
                raise ValueError(
                    "params: no longer accepted; use serve: {source, revision, runtime, image, "
                    "options, extra_args, env} (docs/operating.md, section 4)"
                )
            if "runtime" in data:
                raise ValueError("runtime: moved to serve.runtime")
        return data

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
        for p in self.profiles:  # a plain loop: called for every replica, every pass
            if p.name == name:
                return p
        return None


class Quota(Strict):
    owner: Annotated[str, Field(pattern=OWNER_PATTERN, max_length=256)]
    guarantee: Amount = Field(default_factory=Amount)
    limit: Amount | None = None
    # Share of the borrowable pool (past the guarantees) relative to other owners: an owner of
    # weight 2 may borrow twice as much as one of weight 1 before it yields (fair sharing).
    weight: Annotated[float, Field(strict=True, gt=0, le=1000)] = 1.0

    @model_validator(mode="after")
    def _guarantee_within_limit(self) -> Quota:
        # A guarantee past the limit could never be held: almost always a typo (8 for 4).
        if self.limit is None:
            return self
        for dim in ("gpus", "cpu_cores", "memory_gb"):
            g, lim = getattr(self.guarantee, dim), getattr(self.limit, dim)
            if g is not None and lim is not None and g > lim:
                raise ValueError(
                    f"guarantee.{dim} ({g:g}) is larger than limit.{dim} ({lim:g}): an owner "
                    "cannot be guaranteed more than it may hold"
                )
        return self

    _owner = field_validator("owner")(check_owner)


class Demand(Strict):
    inflight: Count = 0
    queued: Count = 0
    last_used: Timestamp | None = None


FiniteNonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Load(Strict):
    """What a model's servers report, as numbers: the adapter gathers and aggregates
    them (scheduler/demand/), the core only compares them with the model's objectives.

    `running`/`waiting` are sums over the model's replicas; `kv_cache` is their mean usage
    (0-1); latencies are p90 over the adapter's window, in ms. `reporting` is how many replicas
    these numbers come from; `complete` is False when a replica that should have answered did
    not, or the source was unreachable and these are the last good numbers: then the model never
    scales down on them.
    """

    running: FiniteNonNeg | None = None
    waiting: FiniteNonNeg | None = None
    kv_cache: Annotated[float | None, Field(ge=0, le=1, allow_inf_nan=False)] = None
    ttft_p90_ms: FiniteNonNeg | None = None
    itl_p90_ms: FiniteNonNeg | None = None
    tokens_per_s: FiniteNonNeg | None = None
    reporting: Annotated[int, Field(ge=0)] = 0
    complete: bool = True


class DesiredMark(Strict):
    """One pass's unstabilised desired count for a model; the adapter keeps the recent ones
    and hands them back (Snapshot.recent_desired), so the core can stabilise scale-downs."""

    at: Timestamp
    count: Annotated[int, Field(ge=0)]


# ---------------------------------------------------------------- running state


class Hold(Strict):
    until: Timestamp
    for_: str = Field(alias="for")


class OwnerUsage(Strict):
    """An owner's usage (rule F4): GPU-seconds decayed to `at`."""

    gpu_s: NonNegFloat
    at: Timestamp


class Snapshot(Lenient):
    now: Timestamp
    settings: Settings = Field(default_factory=Settings)
    nodes: list[Node] = Field(default_factory=list)
    models: list[Model] = Field(default_factory=list)
    quotas: list[Quota] = Field(default_factory=list)
    demand: dict[str, Demand] = Field(default_factory=dict)
    replicas: list[Replica] = Field(default_factory=list)
    holds: dict[str, Hold] = Field(default_factory=dict)
    # model -> the room kept for its replicas to come (rule R5), handed back by the adapter.
    reservations: dict[str, list[Reservation]] = Field(default_factory=dict)
    # model -> profile -> digest of what a replica started now would run (computed by the
    # adapter; the core only compares). A model absent here is never rolled.
    specs: dict[str, dict[str, str]] = Field(default_factory=dict)
    # model -> the digest whose roll-out failed (a replacement did not become ready): not
    # rolled again until the model's spec changes.
    stalled: dict[str, str] = Field(default_factory=dict)
    # Replica -> the replacement started to move it (consolidation, defragmentation): it is
    # stopped once the replacement runs. Handed on by the plan, kept in the state key.
    moves: dict[str, str] = Field(default_factory=dict)
    # The servers' signals per model, and each model's recent desired counts.
    load: dict[str, Load] = Field(default_factory=dict)
    recent_desired: dict[str, list[DesiredMark]] = Field(default_factory=dict)
    # Models whose key was deleted while replicas of theirs run: name -> when it went missing
    # (the adapter lists one only after a complete catalog read). Their replicas stop once
    # settings.retire_grace_s has passed; a replica of a model neither here nor in `models`
    # is left alone (unknown is never a reason to stop).
    retired: dict[str, Timestamp] = Field(default_factory=dict)
    # The prefetch jobs (rules PF1-PF3): running, complete or failed, not stopped.
    prefetches: list[Prefetch] = Field(default_factory=list)
    # Per owner (as accounted: its quota's prefix), its decayed usage as the last plan handed
    # it on (Plan.usage; the service keeps it in KV). Read only with usage_half_life_s set.
    usage: dict[str, OwnerUsage] = Field(default_factory=dict)
    # model -> removed profile -> since when replicas of it run (adapter, kept in the state
    # key): they stop retire_grace_s later, replaced or not (without a date: once replaced).
    removed_profiles: dict[str, dict[str, Timestamp]] = Field(default_factory=dict)


# ---------------------------------------------------------------- plan


class Plan(Strict):
    actions: list[Action] = Field(default_factory=list)
    models: dict[str, ModelStatus] = Field(default_factory=dict)
    holds: dict[str, Hold] = Field(default_factory=dict)
    # Room kept for models that preempted for it (Snapshot.reservations of the next pass).
    reservations: dict[str, list[Reservation]] = Field(default_factory=dict)
    # Advice for operators, e.g. which drained MIG GPU to re-partition.
    advice: list[str] = Field(default_factory=list)
    # Roll-outs that failed, handed on to the next pass (Snapshot.stalled).
    stalled: dict[str, str] = Field(default_factory=dict)
    # Moves under way (Snapshot.moves): replica -> its replacement.
    moves: dict[str, str] = Field(default_factory=dict)
    # Prefetch jobs to start and stop, and where each prefetching model's weights are.
    prefetches: list[PrefetchAction] = Field(default_factory=list)
    prefetch: dict[str, PrefetchStatus] = Field(default_factory=dict)
    # Each owner's decayed usage as of this pass, to hand back (Snapshot.usage); empty when
    # usage_half_life_s is 0.
    usage: dict[str, OwnerUsage] = Field(default_factory=dict)


def to_json(model: BaseModel) -> str:
    """Canonical JSON: aliases, no None-pruning surprises, stable key order from the models."""
    return model.model_dump_json(by_alias=True, indent=2)


def rfc3339(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")
