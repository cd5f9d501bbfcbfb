"""The building blocks of the core's contract: base classes, name patterns and value bounds
shared by the snapshot's and the plan's models (docs/decision-core.md, "The contract")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

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
