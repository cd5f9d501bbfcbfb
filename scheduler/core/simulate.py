"""Apply a plan to a snapshot (for convergence tests, benches and the demo). Pure."""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.models import Plan, Replica, Snapshot, StartAction, StopAction


def apply_plan(snapshot: Snapshot, plan: Plan, advance_s: float = 0) -> Snapshot:
    now = snapshot.now
    stopped = {a.replica for a in plan.actions if isinstance(a, StopAction)}
    replicas = [r for r in snapshot.replicas if r.id not in stopped and r.state != "stopping"]
    for a in plan.actions:
        if isinstance(a, StartAction):
            replicas.append(
                Replica(
                    id=a.replica,
                    model=a.model,
                    profile=a.profile,
                    state="running",
                    created_at=now,
                    ready_at=now,
                    shards=a.shards,
                )
            )
    return snapshot.model_copy(
        update={
            "replicas": replicas,
            "holds": dict(plan.holds),
            "now": now + timedelta(seconds=advance_s),
        }
    )
