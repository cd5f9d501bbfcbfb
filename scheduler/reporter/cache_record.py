"""The model-cache part of a node's record (`cache` next to `gpus`): what the node's model-cache
host volume holds, in the Hugging Face hub layout.

Shared by the reporter (which writes it) and scheduler.adapters.cache_reports (which reads it).
The GPU record carries it as plain JSON, so a bad cache part never spoils the GPU part.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from scheduler.core.contract_base import Timestamp

MAX_SNAPSHOTS = 1024  # a volume holding more is reported as oversized, not read
MAX_REVISIONS = 64
PB = 10**15

Bytes = Annotated[int, Field(ge=0, le=PB, strict=True)]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
# A hub repository id, org/name (the folder models--org--name).
RepoId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?$")]
Revision = Annotated[str, Field(min_length=1, max_length=256)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SnapshotReport(_Record):
    source: Annotated[RepoId, Field(max_length=256)]
    commit: Commit
    revisions: Annotated[list[Revision], Field(max_length=MAX_REVISIONS)] = Field(
        default_factory=list
    )
    bytes: Bytes
    weights_bytes: Annotated[int, Field(ge=1, le=PB, strict=True)] | None = None
    last_used: Timestamp | None = None  # range-checked, as every timestamp read


class CacheReport(_Record):
    volume: Annotated[str, Field(min_length=1, max_length=128)]
    free_bytes: Bytes | None = None
    snapshots: Annotated[list[SnapshotReport], Field(max_length=MAX_SNAPSHOTS)] = Field(
        default_factory=list
    )
    errors: Annotated[list[str], Field(max_length=64)] = Field(default_factory=list)
