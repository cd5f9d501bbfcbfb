"""Our jobs' allocations as Nomad lists them, and the replica a job and its allocations stand
for (what the snapshot holds of it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from scheduler.adapters.interning import intern
from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.core.contract_base import LATEST
from scheduler.core.models import Replica, Shard

TERMINAL_CLIENT = {"complete", "failed", "lost"}


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
            ids += [intern(str(x)) for x in dev.get("DeviceIDs") or []]
    return ids


def _ns_time(value: Any) -> datetime | None:
    """Nomad's nanoseconds since the epoch; None when absent or out of range."""
    if isinstance(value, int) and 0 < value < _LATEST_NS:
        return datetime.fromtimestamp(value / 1e9, tz=UTC)
    return None


_LATEST_NS = int(LATEST.timestamp()) * 1_000_000_000


def _checked(job: OwnedJob, alloc: dict[str, Any]) -> bool:
    # A job without any service (an old or odd template) is judged on every allocation.
    return not job.checked_groups or str(alloc.get("TaskGroup")) in job.checked_groups


def replica_from(
    job: OwnedJob,
    allocs: list[dict[str, Any]],
    healthy_allocs: set[str],
    last_used_at: datetime | None,
    preempted_for: str | None = None,
) -> Replica | None:
    """The replica a job stands for, or None when it is stopped and all its allocations are gone.

    starting: allocations pending, or running without a passing health check (or none yet);
    running: every shard's allocation running, and healthy where its group has a check (a
    multi-node replica's headless shards have none); stopping: deregistered, still live.
    """
    present = [a for a in allocs if a.get("ClientStatus") not in TERMINAL_CLIENT]
    live = [a for a in present if alloc_live(a)]
    if job.stopped and not present:
        return None
    state: Literal["starting", "running", "stopping"]
    if job.stopped:
        state = "stopping"
    elif (
        live
        and len(live) >= max(len(job.wish), 1)
        and all(a.get("ClientStatus") == "running" for a in live)
        and all(a.get("ID") in healthy_allocs for a in live if _checked(job, a))
    ):
        state = "running"
    else:
        state = "starting"
    shards = [Shard(node=intern(str(a.get("NodeID"))), gpus=alloc_devices(a)) for a in present]
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
        spec=job.spec,
    )
