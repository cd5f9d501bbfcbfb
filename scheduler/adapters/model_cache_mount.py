"""The template's model-cache volume, kept only where the node has it.

Nomad makes a node that lacks a requested host volume infeasible ("missing compatible host
volumes"), so a shard asks for the cache only on a node that advertises a writable volume of
that name; elsewhere the volume and its mounts are dropped and the replica downloads into its
own scratch space (a cold start, not an unplaceable replica).
"""

from __future__ import annotations

from typing import Any

from scheduler.core.fleet import Node

# The template's label for the volume (`volume "model-cache" { ... }`).
MODEL_CACHE_LABEL = "model-cache"
DEFAULT_VOLUME = "llm-model-cache"


def keep_model_cache(group: dict[str, Any], node: Node | None, volume_name: str) -> None:
    """Point the group's model-cache volume at `volume_name` when `node` advertises it, else
    remove the volume and every task's mount of it."""
    volumes = dict(group.get("Volumes") or {})
    if MODEL_CACHE_LABEL not in volumes:
        return  # a template without the cache
    if node is not None and volume_name in node.host_volumes:
        volumes[MODEL_CACHE_LABEL] = {**volumes[MODEL_CACHE_LABEL], "Source": volume_name}
        group["Volumes"] = volumes
        return
    del volumes[MODEL_CACHE_LABEL]
    group["Volumes"] = volumes or None
    for task in group.get("Tasks") or []:
        mounts = [m for m in task.get("VolumeMounts") or [] if m.get("Volume") != MODEL_CACHE_LABEL]
        task["VolumeMounts"] = mounts or None
