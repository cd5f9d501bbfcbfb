"""What Nomad did with a replica's job that the scheduler must undo, and remember.

A placement Nomad refused: the job's evaluation completed with FailedTGAllocs (and a
"blocked" evaluation waits for room), and no allocation exists. An allocation given fewer
device instances than asked (Nomad 1.9.0 to 1.11.0 did so when a wished instance was busy).
Either way the replica is failed: the scheduler deregisters its job, says why, and keeps
the refused spot out of its own placements for a while, so it tries elsewhere instead of
asking for the same spot pass after pass.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from scheduler.adapters.nomad_allocs import alloc_devices
from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.core.models import Node, Shard

REFUSAL_HOLD_S = 600  # how long a refused spot is kept out of placements
# FailedTGAllocs reasons that are about the devices asked for, not the node as a whole.
_DEVICE_REASONS = ("devices", "${device.")


def describe_failed(failed: dict[str, Any]) -> str:
    """FailedTGAllocs as one line, in the words `nomad job status` uses for them."""
    parts: list[str] = []
    for group, metric in sorted(failed.items()):
        metric = metric or {}
        words: list[str] = []
        for reason, n in sorted((metric.get("ConstraintFiltered") or {}).items()):
            words.append(f'constraint "{reason}" filtered {n} node(s)')
        for reason, n in sorted((metric.get("DimensionExhausted") or {}).items()):
            words.append(f'"{reason}" exhausted on {n} node(s)')
        for reason, n in sorted((metric.get("ClassExhausted") or {}).items()):
            words.append(f'class "{reason}" exhausted on {n} node(s)')
        for reason in metric.get("QuotaExhausted") or []:
            words.append(f"quota exhausted: {reason}")
        if not words:
            available = sum((metric.get("NodesAvailable") or {}).values())
            words.append(
                f"{metric.get('NodesEvaluated', 0)} node(s) evaluated, {available} available"
            )
        parts.append(f"{group}: {', '.join(words)}")
    return "; ".join(parts)


def refusal(evaluations: list[dict[str, Any]] | None) -> tuple[str, bool] | None:
    """(why, whether only devices were short) when the job's newest evaluation could not place
    it; None while it is pending or placed. Nomad's scheduler records the failure on the
    evaluation it completes and adds a "blocked" one (scheduler/generic_sched.go)."""
    evals = sorted(evaluations or [], key=lambda e: int(e.get("CreateIndex") or 0), reverse=True)
    for evaluation in evals:
        status = evaluation.get("Status")
        if status in ("pending", "canceled"):
            continue
        failed = evaluation.get("FailedTGAllocs") or {}
        if not failed:
            return None  # the newest decided evaluation placed everything
        reasons: list[str] = []
        for metric in failed.values():
            metric = metric or {}
            reasons += [*(metric.get("ConstraintFiltered") or {})]
            reasons += [*(metric.get("DimensionExhausted") or {})]
        # Every other node is filtered by the shard's own node pin: that says nothing.
        reasons = [r for r in reasons if not r.startswith("${node.unique.id}")]
        devices_only = bool(reasons) and all(
            r.startswith(_DEVICE_REASONS) or r == "missing devices" for r in reasons
        )
        return describe_failed(failed), devices_only
    return None


def short_allocation(job: OwnedJob, allocs: list[dict[str, Any]]) -> str | None:
    """Why an allocation holds other devices than its shard asked for, or None when it matches.

    The allocation's DeviceIDs are the truth; a shard is pinned to its node, so the wish for
    an allocation is the shard on that node."""
    wishes = {s.node: s for s in job.wish}
    for alloc in allocs:
        wish = wishes.get(str(alloc.get("NodeID")))
        if wish is None or not wish.gpus:
            continue
        got = alloc_devices(alloc)
        if not got and not (alloc.get("AllocatedResources") or {}).get("Tasks"):
            continue  # a listing without resources says nothing about devices
        if len(got) < len(wish.gpus):
            return (
                f"allocation {str(alloc.get('ID'))[:8]} on {wish.node} got {len(got)} of"
                f" {len(wish.gpus)} devices ({', '.join(got) or 'none'}); Nomad 1.9.0 to 1.11.0"
                " place short when a wished device is busy"
            )
        if set(got) - set(wish.gpus):
            return (
                f"allocation {str(alloc.get('ID'))[:8]} on {wish.node} got devices it did not ask"
                f" for: {', '.join(sorted(set(got) - set(wish.gpus)))}"
            )
    return None


class RefusalMemory:
    """Spots Nomad refused lately: their devices held (or their node ineligible) until then."""

    def __init__(self, hold_s: int = REFUSAL_HOLD_S) -> None:
        self.hold_s = hold_s
        # (node, devices or None for the whole node) -> until
        self._refused: dict[tuple[str, tuple[str, ...] | None], datetime] = {}

    def remember(self, shards: list[Shard], devices_only: bool, now: datetime) -> None:
        until = now + timedelta(seconds=self.hold_s)
        for shard in shards:
            devices = tuple(shard.gpus) if devices_only and shard.gpus else None
            self._refused[(shard.node, devices)] = until

    def ends(self) -> list[datetime]:
        """When each remembered refusal ends."""
        return list(self._refused.values())

    def apply(self, nodes: list[Node], now: datetime) -> list[Node]:
        self._refused = {k: until for k, until in self._refused.items() if until > now}
        if not self._refused:
            return nodes
        out: list[Node] = []
        for node in nodes:
            mine = [devices for (nid, devices) in self._refused if nid == node.id]
            if not mine:
                out.append(node)
            elif any(devices is None for devices in mine):
                out.append(node.model_copy(update={"eligible": False}))
            else:
                held = set(node.held).union(*(d or () for d in mine))
                out.append(node.model_copy(update={"held": sorted(held)}))
        return out
