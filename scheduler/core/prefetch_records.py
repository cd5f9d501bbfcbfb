"""The contract of prefetching (rules PF1-PF3, docs/decision-core.md): the prefetch jobs a
snapshot lists, and what a plan asks of them and says about each model's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from scheduler.core.contract_base import LENIENT_RECORD, NonNegFloat, Record, Strict

PrefetchCode = Literal[
    "prefetch_ahead",  # a start: the model's weights on one more node (rule PF1)
    "prefetch_yields",  # a stop: the pass's starts need its node's CPU or memory (rule PF2)
    "prefetch_unwanted",  # a stop: its model or revision changed, its node left (rule PF2)
    "prefetch_limit",  # short: settings.prefetch_max prefetches run already (rule PF1)
    "prefetch_no_node",  # short: no other node may take one (rule PF1)
]


@dataclass(frozen=True, slots=True, kw_only=True, config=LENIENT_RECORD)
class Prefetch(Record):
    """A prefetch job: one model's weights downloaded into one node's model cache."""

    id: str  # the Nomad job
    model: str
    node: str
    source: str
    revision: str | None = None
    # running: placed or waiting to be; complete: the weights are there (a cache report may
    # lag); failed: the download failed (the node is not tried again while Nomad keeps it).
    state: Literal["running", "complete", "failed"] = "running"
    cpu_cores: NonNegFloat = 0
    memory_gb: NonNegFloat = 0


class PrefetchAction(Strict):
    op: Literal["start", "stop"]
    model: str
    node: str
    reason: str
    code: PrefetchCode
    id: str = ""  # a stop: the job to stop


class PrefetchStatus(Strict):
    """Where a model's weights are kept ahead of demand (its `serve.prefetch`)."""

    wanted: int
    cached: list[str] = Field(default_factory=list)  # node ids holding its revision
    running: list[str] = Field(default_factory=list)  # node ids downloading it
    failed: list[str] = Field(default_factory=list)  # node ids where a download failed
    short: str | None = None  # why fewer nodes than wanted hold or fetch it
    short_code: PrefetchCode | None = None
