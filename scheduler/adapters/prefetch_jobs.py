"""The shape of prefetch jobs, in one place, and their reading back into the snapshot.

A prefetch job downloads one model's weights into one node's model cache ahead of demand
(serve.prefetch; rules PF1-PF3 in docs/decision-core.md). Its template
(scheduler/data/jobspecs/prefetch.nomad.hcl, a batch job of low priority, no GPU) is parsed
by Nomad as a replica's is (JobMaker); this module pins it to its node, names the cache
volume's source, and sets the runtime image's own downloader as argv items:
`hf download <repo> [--revision R] --exclude original/*` (huggingface_hub's CLI, in both
runtimes' images; `huggingface-cli` no longer works from huggingface_hub 1.0 on). The task
gets the model's serve.env as a replica's does (a gated repository's HF_TOKEN with it), never
through a shell and never logged. A job with PREFETCH_META is a prefetch, never a replica.

Nomad's rule for batch jobs (nomad/state/state_store.go getJobStatus; the reconciler keeps a
batch allocation that completed): a batch job whose allocations are all terminal is `dead`,
its allocation `complete` (the download finished) or `failed`.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Literal

from scheduler.adapters.model_cache_mount import DEFAULT_VOLUME, keep_model_cache
from scheduler.adapters.nomad_jobs import CREATED_META, MHZ_PER_CORE, JobShapeError
from scheduler.core.fleet import Node
from scheduler.core.models import Model, rfc3339
from scheduler.core.prefetch import PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB
from scheduler.core.prefetch_records import Prefetch

PREFETCH_META = "llm_scheduler_prefetch"  # the model
NODE_META = "llm_scheduler_prefetch_node"
SOURCE_META = "llm_scheduler_prefetch_source"
REVISION_META = "llm_scheduler_prefetch_revision"
TEMPLATE = "prefetch"  # scheduler/data/jobspecs/prefetch.nomad.hcl
DOWNLOADER = "hf"
# Meta's checkpoints for Meta's own code (consolidated.*.pth), loaded by neither runtime.
EXCLUDED = "original/*"


def prefetch_job_id(model: str, node_id: str) -> str:
    return f"llm-prefetch-{model}-{node_id}"


def download_argv(model: Model) -> list[str]:
    """`hf download`'s arguments for the model's weights, each one argv item."""
    serve = model.serve
    if serve is None:
        raise JobShapeError(f"model {model.name} says nothing about what to serve")
    if serve.source.startswith("/"):
        raise JobShapeError(f"model {model.name} serves a path, nothing to download")
    argv = ["download", serve.source]
    if serve.revision:
        argv += ["--revision", serve.revision]
    return [*argv, "--exclude", EXCLUDED]


def build_prefetch_job(
    template: dict[str, Any],
    model: Model,
    node: Node,
    created_at: datetime,
    namespace: str | None = None,
    cache_volume: str = DEFAULT_VOLUME,
) -> dict[str, Any]:
    """The prefetch job of `model` on `node`, from the parsed template's first task group."""
    serve = model.serve
    if serve is None:
        raise JobShapeError(f"model {model.name} says nothing about what to serve")
    if cache_volume not in node.host_volumes:
        raise JobShapeError(f"node {node.name} has no host volume {cache_volume!r}")
    groups = template.get("TaskGroups") or []
    if not groups or not groups[0].get("Tasks"):
        raise JobShapeError("prefetch template has no task group with a task")
    job = copy.deepcopy(template)
    jid = prefetch_job_id(model.name, node.id)
    job.update(ID=jid, Name=jid, Type="batch", NodePool=node.pool)
    if namespace:
        job["Namespace"] = namespace
    job["Meta"] = {
        **(template.get("Meta") or {}),
        PREFETCH_META: model.name,
        NODE_META: node.id,
        SOURCE_META: serve.source,
        REVISION_META: serve.revision or "",
        CREATED_META: rfc3339(created_at),
    }
    group = copy.deepcopy(groups[0])
    group["Count"] = 1
    group["Constraints"] = [
        *(group.get("Constraints") or []),
        {"LTarget": "${node.unique.id}", "RTarget": node.id, "Operand": "="},
    ]
    keep_model_cache(group, node, cache_volume)
    task = group["Tasks"][0]
    config = {k: v for k, v in (task.get("Config") or {}).items() if k != "command"}
    config["entrypoint"] = [DOWNLOADER]
    config["args"] = download_argv(model)
    task["Config"] = config
    task["Env"] = {**(task.get("Env") or {}), **serve.env}
    res = task.get("Resources") or {}
    res.update(
        CPU=int(PREFETCH_CPU_CORES * MHZ_PER_CORE),
        MemoryMB=int(PREFETCH_MEMORY_GB * 1024),
        Devices=None,
    )
    task["Resources"] = res
    job["TaskGroups"] = [group]
    return job


def is_prefetch(job: dict[str, Any]) -> bool:
    return bool((job.get("Meta") or {}).get(PREFETCH_META))


def prefetch_of(job: dict[str, Any], allocs: list[dict[str, Any]]) -> Prefetch | None:
    """A prefetch job and its allocations as the snapshot lists it; None for a job that is
    not a prefetch, or one stopped (on its way out: it asks nothing any more)."""
    meta = job.get("Meta") or {}
    if not meta.get(PREFETCH_META) or not meta.get(NODE_META) or job.get("Stop"):
        return None
    latest = max(allocs, key=lambda a: int(a.get("CreateIndex") or 0), default=None)
    client = latest.get("ClientStatus") if latest is not None else None
    state: Literal["running", "complete", "failed"] = "running"
    if client == "complete":
        state = "complete"
    elif client in ("failed", "lost") or (latest is None and job.get("Status") == "dead"):
        state = "failed"  # dead without ever being placed
    return Prefetch(
        id=str(job.get("ID")),
        model=str(meta[PREFETCH_META]),
        node=str(meta[NODE_META]),
        source=str(meta.get(SOURCE_META) or ""),
        revision=str(meta.get(REVISION_META) or "") or None,
        state=state,
        cpu_cores=PREFETCH_CPU_CORES if state == "running" else 0,
        memory_gb=PREFETCH_MEMORY_GB if state == "running" else 0,
    )
