"""Reason codes: what kind of reason a stop, a start or a pending model has, apart from the
sentence an operator reads (as Kueue keeps a preemption target's Reason beside its message).
Consumers (status records, metrics, the dashboard) key by the code; the sentence may be
reworded without breaking them."""

from __future__ import annotations

from typing import Literal

StopCode = Literal[
    "timed_out",  # still starting past its model's load_grace_s (rule L2)
    "draining",  # its node is draining (rule L1)
    "unhealthy_gpu",  # a device it holds was marked unhealthy (rule L1)
    "rolling_update",  # replaced by a replica on the model's new spec (rule L1)
    "rollout_stalled",  # a replacement on the new spec did not start
    "consolidation",  # moved to a better placement (rule L1)
    "retired",  # its model's key was deleted (rule L2)
    "scale_down",  # more live than desired (rules S1-S3)
    "profile_removed",  # its profile is no longer in the model (rule L1)
    "preempted_idle",  # a victim of the idle on-demand tier (rule R2)
    "preempted_borrowed",  # a victim borrowed past its owner's guarantee (rule R2)
    "preempted_lower_class",  # a lower class above its minimum (rule R2)
    "preempted_same_class",  # the same class above its minimum (rule R2)
    "preempted_fair_share",  # borrowed, taken toward the taker's fair share (rule R7)
    "preempted_lower_minimum",  # a lower class's minimum (rule R2)
]

StartCode = Literal[
    "scale_up",  # the model wants more replicas
    "rolling_update",  # a replica on the model's new spec
    "consolidation",  # a better placement for a running replica
    "defragmentation",  # moves a replica so a waiting model fits a node whole
]

PendingCode = Literal[
    "held",  # it gave way to another model's preemption (rule R5)
    "waiting_for_victims",  # replicas preempted for it are still stopping (rule R5)
    "no_room",  # no profile fits and no preemption makes room
    "preemption_held_back",  # room could be made, but a rule held it back (rules R3, R4)
    "quota_limit",  # every profile would pass a quota limit (rule P3)
    "retiring",  # its key was deleted; its replicas stop after the grace
    "profile_removed",  # replicas of a removed profile hold room until replaced or the grace
]
