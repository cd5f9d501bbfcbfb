"""The building blocks of the core's contract: base classes, name patterns and value bounds
shared by the snapshot's and the plan's models (docs/decision-core.md, "The contract")."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

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


# The records the pass reads most (fleet, replicas, catalog) are pydantic dataclasses, frozen
# and with slots, not BaseModels: validated alike at the boundary, but an attribute is a slot.
# A BaseModel's is a lookup in the instance dict behind its __getattr__ hook, about 300
# instructions compiled; a pass reads some 470,000 of them at 1,000 nodes.
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
