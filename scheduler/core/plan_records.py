"""What a plan says besides its holds and advice: its actions, and each model's status."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from scheduler.core.codes import PendingCode, StartCode, StopCode
from scheduler.core.contract_base import Strict
from scheduler.core.fleet import Shard


class StopAction(Strict):
    op: Literal["stop"] = "stop"
    replica: str
    model: str
    reason: str
    preempted_for: str | None = None
    code: StopCode | None = None  # what kind of reason `reason` says (codes.py)


class StartAction(Strict):
    op: Literal["start"] = "start"
    model: str
    profile: str
    replica: str
    shards: list[Shard]
    reason: str
    code: StartCode | None = None  # what kind of reason `reason` says (codes.py)


Action = Annotated[StartAction | StopAction, Field(discriminator="op")]


class ProfileTrial(Strict):
    """What placing one profile ran into: per filter (by its name, e.g. "gpu-count"), on how
    many nodes it said no (`short`), and what it said there (`reasons`: its sentences, each
    with its nodes; a dynamic filter may say several). `note`: why it was not tried (quota)."""

    profile: str
    short: dict[str, int] = Field(default_factory=dict)
    reasons: dict[str, dict[str, int]] = Field(default_factory=dict)
    note: str | None = None
    # The filters among `short` whose "no" no preemption could change on those nodes.
    unresolvable: list[str] = Field(default_factory=list)


class StoppedReplica(Strict):
    """A replica the pass stopped for a reason the model's status shows (a load-grace
    time-out): the stop action says it once, the status until the model's next pass."""

    replica: str
    code: StopCode
    reason: str


class ModelStatus(Strict):
    desired: int
    live: int
    pending: str | None = None
    pending_code: PendingCode | None = None  # what kind of reason `pending` says (codes.py)
    tried: list[ProfileTrial] = Field(default_factory=list)
    # A rolling update or a move to a better profile under way, or a stopped roll-out.
    rollout: str | None = None
    # Which signal set the count, in a sentence; and the count the signals asked
    # for before scale-down stabilisation (the adapter records it as a DesiredMark).
    why: str | None = None
    recommended: int | None = None
    # Replicas stopped still starting past the load grace in this pass, with why.
    timed_out: list[StoppedReplica] = Field(default_factory=list)
    # Room kept for it after a preemption (rule R5), or why that room was released in this pass.
    reserved: str | None = None
