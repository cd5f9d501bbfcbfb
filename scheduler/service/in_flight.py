"""What the actuator has in flight, and how it shows in the next snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.models import Replica, Snapshot, StartAction, StopAction


@dataclass
class Pending:
    action: StartAction | StopAction
    done_at: float | None = None  # time.monotonic() when its Nomad call returned
    # The Nomad index its write was made at (the answer's JobModifyIndex); 0 when it wrote
    # nothing (skipped), None when the call failed: it may or may not have been applied.
    index: int | None = None


# What a job's register or stop answered: the index of its write (see Pending.index).
Written = int | None


def overlaid(snapshot: Snapshot, pending: dict[str, StartAction | StopAction]) -> Snapshot:
    """A start in flight is a `starting` replica on its devices, a stop a `stopping` one."""
    if not pending:
        return snapshot
    replicas = []
    seen: set[str] = set()
    for rep in snapshot.replicas:
        seen.add(rep.id)
        action = pending.get(rep.id)
        if isinstance(action, StopAction) and rep.state != "stopping":
            update = {"state": "stopping", "preempted_for": action.preempted_for}
            rep = rep.model_copy(update=update)
        replicas.append(rep)
    for rid, action in sorted(pending.items()):
        if isinstance(action, StartAction) and rid not in seen:
            replicas.append(
                Replica(
                    id=rid,
                    model=action.model,
                    profile=action.profile,
                    state="starting",
                    created_at=snapshot.now,
                    shards=action.shards,
                )
            )
    return snapshot.model_copy(update={"replicas": replicas})
