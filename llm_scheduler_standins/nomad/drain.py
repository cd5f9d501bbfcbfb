"""Node drains, paced as Nomad's drainer paces them, and nodes that go down.

A drain marks for migration what each task group may give up now (its migrate max_parallel),
stops what is left at the deadline, and completes when the node is empty. Functions of the
Cluster (state.py), under its lock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from llm_scheduler_standins.nomad import views
from llm_scheduler_standins.nomad.alloc_status import is_terminal
from llm_scheduler_standins.nomad.effects import Effects
from llm_scheduler_standins.nomad.nodes import NodeRecord

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.state import Cluster


def drain_node(
    cluster: Cluster,
    node_id: str,
    spec: dict[str, Any] | None,
    *,
    mark_eligible: bool,
    meta: dict[str, str] | None = None,
) -> list[str]:
    """Start (or cancel, with a null spec) a drain, paced as Nomad's drainer paces it.

    While it runs the node reads Drain true with a DrainStrategy and is ineligible. Each
    task group gives up allocations as its migrate max_parallel allows (see _drain_tick);
    at the deadline whatever is left is stopped; a negative deadline stops all at once.
    Returns the evaluations created now.
    """
    with cluster._lock:
        record = cluster._require_node(node_id)
        effects = Effects()
        timer = cluster._timers.pop(f"drain:{node_id}", None)
        if timer is not None:
            timer.cancel()
        if spec is None:
            record.drain_strategy = None
            if mark_eligible:
                record.eligible = True
                effects.merge(cluster._unblock())
            record.modify_index = cluster._bump("nodes")
            cluster._node_event(record)
            cluster._apply(effects)
            return []
        record.eligible = False
        deadline_ns = int(spec.get("Deadline") or 0)
        ignore_system = bool(spec.get("IgnoreSystemJobs"))
        now = datetime.now(UTC)
        force = (
            views.rfc3339(now + timedelta(seconds=deadline_ns / 1e9))
            if deadline_ns > 0
            else "0001-01-01T00:00:00Z"
        )
        # nomad/structs DrainStrategy embeds DrainSpec: its fields are flattened in JSON.
        record.drain_strategy = {
            "Deadline": deadline_ns,
            "IgnoreSystemJobs": ignore_system,
            "ForceDeadline": force,
            "StartedAt": views.rfc3339(now),
        }
        record.last_drain = {
            "AccessorID": "",
            "Meta": meta,
            "StartedAt": views.rfc3339(now),
            "Status": "draining",
            "UpdatedAt": views.rfc3339(now),
        }
        eval_ids = cluster._migrate(record, force=deadline_ns < 0, effects=effects)
        if deadline_ns > 0:
            effects.drain_deadlines.append((node_id, deadline_ns / 1e9))
        record.modify_index = cluster._bump("nodes")
        cluster._node_event(record)
        cluster._apply(effects)
        return eval_ids


def migrate(cluster: Cluster, record: NodeRecord, *, force: bool, effects: Effects) -> list[str]:
    """Mark for migration what the drain may take now; complete the drain when empty.

    nomad/drainer/watch_jobs.go handleTaskGroup: per task group, thresholdCount =
    Count - Migrate.MaxParallel and numToDrain = healthy - thresholdCount, where healthy
    counts the group's running allocations with health that are not migrating. So a
    count-1 group with the default max_parallel 1 goes at once, and max_parallel 0
    holds its allocation until the deadline (force).
    """
    strategy = record.drain_strategy or {}
    node_id = record.node.id
    on_node = [a for a in cluster._live_allocs() if a["NodeID"] == node_id]
    system = [a for a in on_node if a["JobType"] in ("system", "sysbatch")]
    others = [a for a in on_node if a not in system]
    chosen: list[dict[str, Any]] = []
    if force:
        chosen = list(others)
    else:
        by_group: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for alloc in others:
            by_group.setdefault(
                (alloc["Namespace"], alloc["JobID"], alloc["TaskGroup"]), []
            ).append(alloc)
        for (ns, job_id, tg), allocs in by_group.items():
            job = cluster._jobs.get((ns, job_id))
            group = next((g for g in (job or {}).get("TaskGroups") or [] if g["Name"] == tg), None)
            if job is None or group is None:
                chosen += allocs
                continue
            # DeploymentStatus.HasHealth: health set either way; migrating ones excluded.
            healthy = sum(
                1
                for a in cluster._job_allocs(job)
                if a["TaskGroup"] == tg
                and not is_terminal(a)
                and (a.get("DeploymentStatus") or {}).get("Healthy") is not None
                and not (a.get("DesiredTransition") or {}).get("Migrate")
            )
            threshold = int(group["Count"]) - _max_parallel(job, group)
            chosen += allocs[: max(0, healthy - threshold)]
    # Nomad drains system jobs last, unless told to leave them.
    if len(chosen) == len(others) and not strategy.get("IgnoreSystemJobs"):
        chosen += system
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for alloc in chosen:
        alloc["DesiredTransition"] = {**alloc["DesiredTransition"], "Migrate": True}
        cluster._stop_alloc(alloc, "alloc is being migrated", effects)
        key = (alloc["Namespace"], alloc["JobID"])
        if key in cluster._jobs and alloc["JobType"] not in ("system", "sysbatch"):
            jobs[key] = cluster._jobs[key]
    eval_ids = [cluster._evaluate(job, "node-drain", effects)["ID"] for job in jobs.values()]
    for job in jobs.values():
        cluster._refresh_status(job)
    left = [a for a in on_node if not is_terminal(a)]
    if not left or (strategy.get("IgnoreSystemJobs") and all(a in system for a in left)):
        cluster._finish_drain(record)
    return eval_ids


def finish_drain(cluster: Cluster, record: NodeRecord) -> None:
    """The drain is done: no strategy any more, the node stays ineligible."""
    timer = cluster._timers.pop(f"drain:{record.node.id}", None)
    if timer is not None:
        timer.cancel()
    record.drain_strategy = None
    if record.last_drain is not None:
        record.last_drain = {
            **record.last_drain,
            "Status": "complete",
            "UpdatedAt": views.rfc3339_now(),
        }
    record.modify_index = cluster._bump("nodes")
    cluster._node_event(record)


def drain_tick(cluster: Cluster) -> Effects:
    """After any change: running drains may take more (a replacement became healthy)."""
    effects = Effects()
    for record in cluster._nodes.values():
        if record.drain_strategy is not None:
            cluster._migrate(record, force=False, effects=effects)
    return effects


def drain_deadline(cluster: Cluster, key: str) -> None:
    node_id = key.split(":", 1)[1]
    with cluster._lock:
        cluster._timers.pop(key, None)
        record = cluster._nodes.get(node_id)
        if record is None or record.drain_strategy is None:
            return
        effects = Effects()
        cluster._migrate(record, force=True, effects=effects)
        cluster._apply(effects)


def lose_allocs(cluster: Cluster, node_id: str) -> Effects:
    """A node that went down loses its allocations; their jobs get replacements."""
    effects = Effects()
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for alloc in cluster._live_allocs():
        if alloc["NodeID"] == node_id:
            alloc["DesiredStatus"] = "stop"
            alloc["DesiredDescription"] = "alloc is lost since its node is down"
            cluster._finish(alloc, "lost", effects)
            key = (alloc["Namespace"], alloc["JobID"])
            if key in cluster._jobs:
                jobs[key] = cluster._jobs[key]
    for job in jobs.values():
        if not job["Stop"]:
            cluster._evaluate(job, "node-update", effects)
        cluster._refresh_status(job)
    return effects


def _max_parallel(job: dict[str, Any], group: dict[str, Any]) -> int:
    """The group's migrate max_parallel, else the job's, else Nomad's default of 1."""
    for block in (group.get("Migrate"), job.get("Migrate")):
        if isinstance(block, dict) and block.get("MaxParallel") is not None:
            return int(block["MaxParallel"])
    return 1
