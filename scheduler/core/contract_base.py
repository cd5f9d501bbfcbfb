"""The building blocks of the core's contract: base classes, name patterns and value bounds
shared by the snapshot's and the plan's models (docs/decision-core.md, "The contract")."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from scheduler.core.mig_geometry import GEOMETRIES, GpuGeometry, geometry_for

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
# Strict: a number written as a string ("5") is refused, not silently converted.
NonNegFloat = Annotated[float, Field(ge=0, le=MAX_AMOUNT, allow_inf_nan=False, strict=True)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT, strict=True)]
Duration = Annotated[int, Field(ge=0, le=MAX_DURATION_S, strict=True)]
# A model's gateway bounds, read by the catalog and by the gateway alike.
ActivationTimeout = Annotated[int, Field(ge=1, le=86400, strict=True)]
MaxQueued = Annotated[int, Field(ge=0, le=1_000_000, strict=True)]

# Every timestamp the core computes with lies in this range, so that adding any duration the
# contract allows (or subtracting two of them) cannot overflow: `9999-12-31` plus a grace
# raises OverflowError, which would stop every pass.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def check_timestamp(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(
            f"{value.isoformat()} is out of range (from {EARLIEST.year} to before {LATEST.year})"
        )
    return value


Timestamp = Annotated[AwareDatetime, AfterValidator(check_timestamp)]


# A GPU model name as Nomad's device plugin reports it ("NVIDIA A100-SXM4-40GB"), or part
# of one; a MIG profile as NVIDIA names it ("3g.40gb", "1g.10gb+me").
GpuModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,127}$")]
MigProfileName = Annotated[str, Field(pattern=r"^[1-9]g\.[0-9]{1,4}gb(\+me)?$")]


def boards_matching(gpu_models: list[str] | None) -> list[GpuGeometry]:
    """The boards of the MIG table a profile's `gpu_models` allow (all, when it lists none)."""
    if not gpu_models:
        return list(GEOMETRIES)
    wanted = [w.upper() for w in gpu_models]
    return [
        g
        for g in GEOMETRIES
        if any(w in g.display_name.upper() or geometry_for(w) is g for w in wanted)
    ]


def mig_profile_problem(mig_profile: str | None, gpu_models: list[str] | None) -> str | None:
    """Why no GPU a profile may use can have its MIG slice (it would wait forever), or None.
    Boards the table does not know are not judged."""
    boards = boards_matching(gpu_models) if mig_profile is not None else []
    if not boards or any(b.profile(str(mig_profile)) for b in boards):
        return None
    names = sorted({n for b in boards for n in b.profile_names})
    return (
        f"{mig_profile!r} is no MIG profile of {', '.join(b.display_name for b in boards)} "
        f"(one of {', '.join(names)})"
    )


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
    """An amount of resources. A missing dimension is not constrained, for a guarantee and a
    limit alike: a guarantee of {gpus: 4} protects replicas by their GPUs alone."""

    gpus: NonNegFloat | None = None
    cpu_cores: NonNegFloat | None = None
    memory_gb: NonNegFloat | None = None


# The records the pass reads most (fleet, replicas, catalog) are pydantic dataclasses, frozen
# and with slots, not BaseModels: validated alike at the boundary, but an attribute is a slot.
# A BaseModel's is a lookup in the instance dict behind its __getattr__ hook, and a pass reads
# these attributes hundreds of times per node.
STRICT_RECORD = ConfigDict(extra="forbid", populate_by_name=True)
LENIENT_RECORD = ConfigDict(extra="ignore", populate_by_name=True)


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


class Record:
    """The BaseModel methods the code base uses, on a record that is a pydantic dataclass
    (`@dataclass(frozen=True, slots=True, kw_only=True, config=STRICT_RECORD)`)."""

    __slots__ = ()

    @classmethod
    def model_validate(cls, obj: object) -> Self:
        out: Self = _adapter(cls).validate_python(obj)
        return out

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Self:
        out: Self = _adapter(cls).validate_json(data)
        return out

    @classmethod
    def model_json_schema(cls, by_alias: bool = True, mode: Any = "validation") -> dict[str, Any]:
        return _adapter(cls).json_schema(by_alias=by_alias, mode=mode)

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(getattr(cls, "__dataclass_fields__", ()))

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A shallow copy with `update`'s fields set, not validated (as BaseModel.model_copy:
        the callers are the adapters and the core, with values of the field's type)."""
        new = copy.copy(self)
        if update:
            fields = getattr(type(self), "__dataclass_fields__", {})
            for name, value in update.items():
                if name not in fields:
                    raise TypeError(f"{type(self).__name__} has no field {name!r}")
                object.__setattr__(new, name, value)
        return new

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = _adapter(type(self)).dump_python(self, **kwargs)
        return out

    def model_dump_json(self, **kwargs: Any) -> str:
        return _adapter(type(self)).dump_json(self, **kwargs).decode()
