"""A pass that would stop something acts on listings read just now, not on a watch's answer.

A watch's answer is complete, but says nothing of whether Nomad can still be read. What the
plan starts independently of its stops goes out first, so that new demand does not wait for
that read.
"""

from __future__ import annotations

from scheduler.adapters.snapshot_builder import ClusterView
from scheduler.core.models import Plan, StartAction, StopAction


def destructive(view: ClusterView, plan: Plan) -> bool:
    """The plan stops a replica, or Nomad failed one (which the actuator stops)."""
    return bool(view.faults) or any(isinstance(a, StopAction) for a in plan.actions)


def independent_starts(view: ClusterView, plan: Plan) -> Plan:
    """The plan's starts that owe nothing to its stops: none of the same model (a roll-out's
    surge, a move) and none on a node a stop frees (preemption, room made). The others go out
    with their stops, after them, as the actuator queues a plan."""
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    shards = {r.id: r.shards for r in view.snapshot.replicas}
    models = {a.model for a in stops}
    nodes = {s.node for a in stops for s in shards.get(a.replica, [])}
    nodes |= {s.node for r in view.faults for s in shards.get(r, [])}
    starts = [
        a
        for a in plan.actions
        if isinstance(a, StartAction)
        and a.model not in models
        and not any(s.node in nodes for s in a.shards)
    ]
    return plan.model_copy(update={"actions": starts})
