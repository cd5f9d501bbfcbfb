"""What the actuator is asked to do after a pass, and the few facts it needs to do it.

The actuator never sees the pass's ClusterView. Bad input holds part of the plan back here,
before the actuator: a model whose KV value (or demand value) is invalid keeps its replicas
(none of its stops go out), and nothing starts under a quota that is invalid with no last good
value. A replica Nomad failed is stopped as part of the work, and says why in its model's
status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog

from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.adapters.snapshot_builder import ClusterView
from scheduler.core.models import Model, Node, Plan, StartAction, StopAction
from scheduler.core.prefetch_records import PrefetchAction

log = structlog.get_logger("llm-scheduler.act")


@dataclass(frozen=True)
class Facts:
    """What the actuator needs to know of the cluster to carry the work out."""

    models: dict[str, Model]  # the catalog the plan was decided on, by name
    jobs: dict[str, OwnedJob]  # replica id -> its job: only these are ever stopped
    listed: frozenset[str]  # every job id Nomad listed, ours or not
    nodes: dict[str, Node]  # by id: a job's devices, node pool and the head's address
    now: datetime  # the pass's now: the jobs' creation stamp


@dataclass(frozen=True)
class Work:
    """One pass's work for the actuator."""

    actions: list[StartAction | StopAction]  # the plan's, less what bad input holds back
    failed: dict[str, str]  # replica Nomad failed -> why: stopped, and said in its status
    purge: list[str]  # stopped job ids with no allocation left
    facts: Facts
    prefetches: list[PrefetchAction] = field(default_factory=list)  # rules PF1-PF3


def work_of(view: ClusterView, plan: Plan) -> Work:
    """The work `plan` asks for, as the view allows it."""
    failed = {
        replica: why
        for replica, why in sorted(view.faults.items())
        if (job := view.jobs.get(replica)) is not None
        and not job.stopped
        and job.model not in view.frozen_models
    }
    snapshot = view.snapshot
    owners = {m.name: m.owner for m in snapshot.models}
    actions: list[StartAction | StopAction] = []
    for action in plan.actions:
        if isinstance(action, StopAction):
            if action.replica in failed:
                continue  # stopped as a failed replica
            if action.model in view.frozen_models:
                log.warning(
                    "stop_skipped",
                    replica=action.replica,
                    model=action.model,
                    reason="the model's KV value is invalid; keeping its replicas",
                )
                continue
        else:
            owner = owners.get(action.model, "")
            blocked = [o for o in view.blocked_owners if owner == o or owner.startswith(o + "/")]
            if blocked:
                log.warning(
                    "start_skipped", model=action.model, reason=f"quota of {blocked[0]} is invalid"
                )
                continue
        actions.append(action)
    any_start = any(isinstance(a, StartAction) for a in actions) or any(
        a.op == "start" for a in plan.prefetches
    )
    facts = Facts(
        models={m.name: m for m in snapshot.models},
        jobs=view.jobs,
        listed=frozenset(view.job_ids),
        # Only starts read the nodes: a pass that starts nothing does not index them.
        nodes={n.id: n for n in snapshot.nodes} if any_start else {},
        now=snapshot.now,
    )
    return Work(actions, failed, list(view.purgeable), facts, list(plan.prefetches))
