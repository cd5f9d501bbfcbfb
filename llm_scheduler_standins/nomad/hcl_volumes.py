"""A group's `volume` blocks and a task's `volume_mount` blocks, as Nomad's parse gives them
(api/tasks.go: TaskGroup.Volumes is a map by the block's label, Task.VolumeMounts a list)."""

from __future__ import annotations

from typing import Any

from llm_scheduler_standins.nomad.hcl_values import Body, HclError

_VOLUME_ATTRS = {
    "type",
    "source",
    "read_only",
    "sticky",
    "per_alloc",
    "access_mode",
    "attachment_mode",
}
_MOUNT_ATTRS = {"volume", "destination", "read_only", "propagation_mode", "selinux_label"}


def volumes_json(group: Body) -> dict[str, Any] | None:
    found: dict[str, Any] = {}
    for label, raw in group.blocks("volume"):
        if not label:
            raise HclError(f"{group.where}: volume block needs a name label")
        b = Body(raw, f"{group.where} volume {label!r}", group.scope, _VOLUME_ATTRS, set())
        found[label] = {
            "Name": label,
            "Type": b.text("type", "") or "",
            "Source": b.text("source", "") or "",
            "ReadOnly": bool(b.flag("read_only", False)),
            "Sticky": bool(b.flag("sticky", False)),
            "AccessMode": b.text("access_mode", "") or "",
            "AttachmentMode": b.text("attachment_mode", "") or "",
            "MountOptions": None,
            "PerAlloc": bool(b.flag("per_alloc", False)),
        }
    return found or None


def volume_mounts_json(task: Body) -> list[dict[str, Any]] | None:
    found = []
    for _, raw in task.blocks("volume_mount"):
        b = Body(raw, f"{task.where} volume_mount", task.scope, _MOUNT_ATTRS, set())
        found.append(
            {
                "Volume": b.text("volume", "") or "",
                "Destination": b.text("destination", "") or "",
                "ReadOnly": bool(b.flag("read_only", False)),
                "PropagationMode": b.text("propagation_mode", "private") or "private",
                "SELinuxLabel": b.text("selinux_label", "") or "",
            }
        )
    return found or None
