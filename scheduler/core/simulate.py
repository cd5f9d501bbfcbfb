"""Apply a plan to a snapshot (for convergence tests, benches and the demo). Pure."""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.models import Plan, Replica, Snapshot, StartAction, StopAction
from scheduler.core.scaling import remember, window_of


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
    # What the service does between passes: keep each model's recent desired counts.
    marks = {
        m.name: remember(
            snapshot.recent_desired.get(m.name, []),
            now,
            plan.models[m.name].recommended or 0,
            window_of(m, snapshot.settings),
        )
        for m in snapshot.models
        if m.name in plan.models
    }
    return snapshot.model_copy(
        update={
            "recent_desired": marks,
            "replicas": replicas,
            "holds": dict(plan.holds),
            "reservations": dict(plan.reservations),
            # As the service's state key hands them on: moves under way, and
            # roll-outs that failed.
            "moves": dict(plan.moves),
            "stalled": dict(plan.stalled),
            "usage": dict(plan.usage),  # as the service's usage key hands it on
            "now": now + timedelta(seconds=advance_s),
        }
    )
