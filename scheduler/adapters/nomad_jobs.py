"""The shape of the Nomad jobs the scheduler owns. Nothing else knows it.

A start renders `jobspecs/<runtime>.nomad.hcl` through Nomad's /v1/jobs/parse, then this
module gives it its placement: one task group per shard pinned to its node, a `device`
block asking for exactly the planned instances, and the Meta that lets a restarted
scheduler rebuild its replicas from Nomad alone. A job without MODEL_META is not ours.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.core.models import Model, Node, Replica, Shard, StartAction, rfc3339

MODEL_META = "llm_scheduler_model"
PROFILE_META = "llm_scheduler_profile"
REPLICA_META = "llm_scheduler_replica"
CREATED_META = "llm_scheduler_created"
PREEMPTED_META = "llm_scheduler_preempted_for"
SHARD_META = "llm_scheduler_shard"
MHZ_PER_CORE = 1000
TERMINAL_CLIENT = {"complete", "failed", "lost"}


class JobShapeError(ValueError):
    """A planned start that cannot be written as a Nomad job (e.g. unknown device ids)."""


def job_id(model: str, replica: str) -> str:
    return f"llm-{model}-{replica}"


def service_name(model: str) -> str:
    return f"llm-{model}"


def template_variables(model: Model, image: str) -> str:
    """HCL variable assignments for /v1/jobs/parse (JSON strings are valid HCL strings)."""
    args = " ".join(f"--{k} {v}" for k, v in sorted(model.params.items()))
    values = {
        "model": model.name,
        "service_name": service_name(model.name),
        "image": image,
        "extra_args": args,
    }
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def _device_names(nodes: dict[str, Node], shard: Shard) -> str:
    node = nodes.get(shard.node)
    if node is None:
        raise JobShapeError(f"shard on unknown node {shard.node!r}")
    names: dict[str, str] = {}
    for gpu in node.gpus:
        names[gpu.id] = gpu.model
        for s in gpu.mig or []:
            names[s.id] = f"{gpu.model} MIG {s.profile}"
    wanted = {names.get(d) for d in shard.gpus}
    if None in wanted:
        raise JobShapeError(f"node {shard.node}: unknown device in {shard.gpus}")
    if len(wanted) != 1:
        raise JobShapeError(
            f"node {shard.node}: devices of several models {sorted(map(str, wanted))}"
        )
    return f"nvidia/gpu/{wanted.pop()}"


def build_job(
    template: dict[str, Any],
    model: Model,
    action: StartAction,
    nodes: dict[str, Node],
    created_at: datetime,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The job to register for `action`, from the parsed template's first task group."""
    profile = model.profile(action.profile)
    if profile is None:
        raise JobShapeError(f"model {model.name} has no profile {action.profile!r}")
    groups = template.get("TaskGroups") or []
    if not groups or not groups[0].get("Tasks"):
        raise JobShapeError("template has no task group with a task")
    job = copy.deepcopy(template)
    jid = job_id(model.name, action.replica)
    job.update(ID=jid, Name=jid)
    if namespace:
        job["Namespace"] = namespace
    job["Meta"] = {
        **(template.get("Meta") or {}),
        MODEL_META: model.name,
        PROFILE_META: action.profile,
        REPLICA_META: action.replica,
        CREATED_META: rfc3339(created_at),
    }
    job["TaskGroups"] = []
    for i, shard in enumerate(action.shards):
        group = copy.deepcopy(groups[0])
        group["Name"] = f"shard-{i}"
        group["Count"] = 1
        group["Meta"] = {**(group.get("Meta") or {}), SHARD_META: str(i)}
        group["Constraints"] = [
            *(group.get("Constraints") or []),
            {"LTarget": "${node.unique.id}", "RTarget": shard.node, "Operand": "="},
        ]
        hold_on_drain(group)
        task = group["Tasks"][0]
        res = task.setdefault("Resources", {}) or {}
        task["Resources"] = res
        res["CPU"] = max(int(profile.cpu_cores * MHZ_PER_CORE), 100)
        res["MemoryMB"] = max(int(profile.memory_gb * 1024), 256)
        res["Devices"] = [
            {
                "Name": _device_names(nodes, shard),
                "Count": len(shard.gpus),
                "Constraints": [
                    {
                        "LTarget": "${device.ids}",
                        "RTarget": ",".join(shard.gpus),
                        "Operand": "set_contains_any",
                    }
                ],
            }
        ]
        job["TaskGroups"].append(group)
    return job


def hold_on_drain(group: dict[str, Any]) -> None:
    """`migrate { max_parallel = 0 }`: a drain leaves the shard's allocation running until its
    deadline (nomad/drainer/watch_jobs.go: numToDrain = healthy - (count - max_parallel)),
    so the scheduler can start the replacement elsewhere first and stop this one after
    (make-before-break). Nomad could not replace it anyway: the group is pinned to its node."""
    group["Migrate"] = {
        "MaxParallel": 0,
        "HealthCheck": "checks",
        "MinHealthyTime": 10 * 1_000_000_000,
        "HealthyDeadline": 300 * 1_000_000_000,
    }


# ------------------------------------------------------------------ reading jobs back


@dataclass(frozen=True)
class OwnedJob:
    job_id: str
    model: str
    profile: str
    replica: str
    created_at: datetime
    preempted_for: str | None
    stopped: bool  # deregistered (Stop) or dead
    wish: list[Shard]  # the placement the job asked for


def _parse_time(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return datetime(1970, 1, 1, tzinfo=UTC)


def owned_job(job: dict[str, Any]) -> OwnedJob | None:
    """The scheduler's reading of a full job, or None for a job it did not create."""
    meta = job.get("Meta") or {}
    if not meta.get(MODEL_META) or not meta.get(REPLICA_META):
        return None
    wish: list[Shard] = []
    for group in job.get("TaskGroups") or []:
        node = next(
            (
                c.get("RTarget")
                for c in group.get("Constraints") or []
                if c.get("LTarget") == "${node.unique.id}"
            ),
            None,
        )
        ids: list[str] = []
        for task in group.get("Tasks") or []:
            for dev in (task.get("Resources") or {}).get("Devices") or []:
                for c in dev.get("Constraints") or []:
                    if c.get("LTarget") == "${device.ids}":
                        ids += [x for x in str(c.get("RTarget", "")).split(",") if x]
        if node:
            wish.append(Shard(node=str(node), gpus=ids))
    return OwnedJob(
        job_id=str(job["ID"]),
        model=str(meta[MODEL_META]),
        profile=str(meta.get(PROFILE_META, "")),
        replica=str(meta[REPLICA_META]),
        created_at=_parse_time(meta.get(CREATED_META)),
        preempted_for=meta.get(PREEMPTED_META) or None,
        stopped=bool(job.get("Stop")) or job.get("Status") == "dead",
        wish=wish,
    )


def alloc_terminal(alloc: dict[str, Any]) -> bool:
    """Gone for good: stopped or evicted by the server, or finished on the client."""
    return alloc.get("ClientStatus") in TERMINAL_CLIENT or alloc.get("DesiredStatus") in (
        "stop",
        "evict",
    )


def alloc_live(alloc: dict[str, Any]) -> bool:
    return alloc.get("ClientStatus") not in TERMINAL_CLIENT and alloc.get("DesiredStatus") == "run"


def alloc_devices(alloc: dict[str, Any]) -> list[str]:
    """The device ids Nomad actually gave the allocation: the truth, not the plan's wish."""
    ids: list[str] = []
    tasks = ((alloc.get("AllocatedResources") or {}).get("Tasks")) or {}
    for task in tasks.values():
        for dev in (task or {}).get("Devices") or []:
            ids += [str(x) for x in dev.get("DeviceIDs") or []]
    return ids


def _ns_time(value: Any) -> datetime | None:
    if isinstance(value, int) and value > 0:
        return datetime.fromtimestamp(value / 1e9, tz=UTC)
    return None


def replica_from(
    job: OwnedJob,
    allocs: list[dict[str, Any]],
    healthy_allocs: set[str],
    last_used_at: datetime | None,
    preempted_for: str | None = None,
) -> Replica | None:
    """The replica a job stands for, or None when it is stopped and all its allocations are gone.

    starting: allocations pending, or running without a passing health check (or none yet);
    running: every shard's allocation running and healthy; stopping: deregistered, still live.
    """
    present = [a for a in allocs if a.get("ClientStatus") not in TERMINAL_CLIENT]
    live = [a for a in present if alloc_live(a)]
    if job.stopped and not present:
        return None
    if job.stopped:
        state = "stopping"
    elif (
        live
        and len(live) >= max(len(job.wish), 1)
        and all(a.get("ClientStatus") == "running" and a.get("ID") in healthy_allocs for a in live)
    ):
        state = "running"
    else:
        state = "starting"
    shards = [Shard(node=str(a.get("NodeID")), gpus=alloc_devices(a)) for a in present]
    if not shards:
        shards = list(job.wish)
    ready_at = None
    if state == "running":
        times = [t for t in (_ns_time(a.get("ModifyTime")) for a in live) if t]
        ready_at = max(times) if times else job.created_at
    return Replica(
        id=job.replica,
        model=job.model,
        profile=job.profile,
        state=state,
        created_at=job.created_at,
        ready_at=ready_at,
        last_used_at=last_used_at,
        preempted_for=preempted_for or job.preempted_for,
        shards=shards,
    )
