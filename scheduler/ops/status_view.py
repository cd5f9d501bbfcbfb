"""Read the scheduler's status records and, when they say too little, ask the decision core."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import Plan, ProfileTrial, StoppedReplica
from scheduler.ops.time_to_ready import ready_sentence


class ReplicaRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    state: str
    nodes: list[str] = Field(default_factory=list)
    node_names: list[str] = Field(default_factory=list)  # beside `nodes`, in the same order
    devices: list[str] = Field(default_factory=list)


class ExpectedReady(BaseModel):
    """A model's expected start-to-ready seconds, as the service keeps them (state key)."""

    model_config = ConfigDict(extra="ignore")
    warm_s: float | None = None
    cold_s: float | None = None
    warm_nodes: list[str] = Field(default_factory=list)
    learned: dict[str, int] = Field(default_factory=dict)

    def sentence(self) -> str:
        return ready_sentence(self.warm_s, self.cold_s, self.warm_nodes, self.learned)


class PrefetchRecord(BaseModel):
    """A prefetching model's `prefetch` in its status record (node names)."""

    model_config = ConfigDict(extra="ignore")
    wanted: int = 0
    cached: list[str] = Field(default_factory=list)
    running: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    short: str | None = None
    last_error: str | None = None

    def sentence(self) -> str:
        """ "weights on gpu-1, gpu-2 (2 of 3); downloading on gpu-3; failed on gpu-4"."""
        held = ", ".join(self.cached) or "no node"
        parts = [f"weights on {held} ({len(self.cached)} of {self.wanted})"]
        parts += [f"downloading on {', '.join(self.running)}"] if self.running else []
        parts += [f"failed on {', '.join(self.failed)}"] if self.failed else []
        parts += [self.short] if self.short else []
        parts += [f"last error: {self.last_error}"] if self.last_error else []
        return "; ".join(parts)


class StatusRecord(BaseModel):
    """`<prefix>status/<model>` as the service writes it (extra fields are kept for --json)."""

    model_config = ConfigDict(extra="allow")
    desired: int = 0
    live: int = 0
    pending: str | None = None
    pending_code: str | None = None  # what kind of reason `pending` is (core/codes.py)
    why: str | None = None  # which signal set the count
    replicas: list[ReplicaRecord] = Field(default_factory=list)
    last_error: str | None = None
    updated_at: str | None = None
    tried: list[ProfileTrial] | None = None
    rollout: str | None = None  # a rolling update or move under way, or a stopped roll-out
    timed_out: list[StoppedReplica] = Field(default_factory=list)  # stopped past load grace
    reserved: str | None = None  # room kept for it after a preemption, or why released
    time_to_ready: ExpectedReady | None = None  # from the time-to-ready state key
    prefetch: PrefetchRecord | None = None  # weights kept ahead of demand (serve.prefetch)


@dataclass
class StatusReport:
    records: dict[str, StatusRecord] = field(default_factory=dict)
    general_errors: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "key: why"


def read_status(client: Any, kv: KVLayout) -> StatusReport:
    _, entries = client.kv.get(kv.status, recurse=True)
    report = StatusReport()
    for entry in entries or []:
        key = entry["Key"]
        name = KVLayout.tail(key, kv.status)
        if not name or "/" in name:
            continue
        try:
            data = json.loads(entry["Value"] or b"null")
        except ValueError:
            report.unreadable.append(f"{key}: not JSON")
            continue
        if key == kv.status_errors:
            if isinstance(data, dict):
                report.general_errors = [str(e) for e in data.get("errors") or []]
            continue
        try:
            report.records[name] = StatusRecord.model_validate(data)
        except ValidationError as err:
            report.unreadable.append(f"{key}: {err.errors()[0]['msg']}")
    if report.records:  # else nothing to add to (and an empty read may be an ACL's)
        _add_expected(client, kv, report)
    return report


def _add_expected(client: Any, kv: KVLayout, report: StatusReport) -> None:
    """Each record's expected time to ready; a bad part is named and left out."""
    _, entry = client.kv.get(kv.time_to_ready)
    if not entry or not entry.get("Value"):
        return
    try:
        data = json.loads(entry["Value"])
    except ValueError:
        data = None
    expected = data.get("expected") if isinstance(data, dict) else None
    if not isinstance(expected, dict):
        report.unreadable.append(f"{kv.time_to_ready}: expected: should be a JSON object")
        return
    for name, record in report.records.items():
        if name not in expected:
            continue
        try:
            record.time_to_ready = ExpectedReady.model_validate(expected[name])
        except ValidationError as err:
            report.unreadable.append(
                f"{kv.time_to_ready}: expected.{name}: {err.errors()[0]['msg']}"
            )


@dataclass
class LiveDecision:
    """What the next pass would do on the cluster as it is now."""

    snapshot_json: dict[str, Any]
    plan: Plan
    input_errors: list[str]
    warnings: list[str]


def decide_live() -> LiveDecision:
    """Build a live snapshot exactly as the service does (same config, builder and plugins)."""
    from datetime import UTC, datetime

    from scheduler.core.decide import decide
    from scheduler.service.config import load_config
    from scheduler.service.loop import Service

    service = Service(load_config())
    try:
        view = service.builder.build(datetime.now(UTC))
        plan = decide(view.snapshot, service.plugins)
    finally:
        service.nomad.close()
    return LiveDecision(
        snapshot_json=view.snapshot.model_dump(mode="json", by_alias=True),
        plan=plan,
        input_errors=view.input_errors,
        warnings=list(view.warnings),
    )


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def explain_trials(tried: list[ProfileTrial]) -> list[str]:
    """One line per profile: what each filter said, on how many nodes, and which filter it
    was ("too few free GPUs on 12 nodes (gpu-count)"). A record without the filters' words
    (written before they were kept) shows the counts' keys as they are."""
    lines = []
    for t in tried:
        parts = []
        for name, n in t.short.items():
            said = t.reasons.get(name)
            if said:
                words = ", ".join(f"{text} on {_nodes(k)}" for text, k in said.items())
                parts.append(f"{words} ({name})")
            else:
                parts.append(f"{name} on {_nodes(n)}")
        text = ", ".join(parts) or "nothing short"
        lines.append(f"{t.profile}: {text}" + (f" ({t.note})" if t.note else ""))
    return lines


def why_not_pending(desired: int, live: int, starting: int, actions: list[Any]) -> str:
    """What a model that is not pending is doing: it may still be short of its desired count
    (the next pass starts replicas), above it (stops some), or have replicas still starting
    (`live` counts them; they are not ready yet)."""
    starts = [a for a in actions if a.op == "start"]
    stops = [a for a in actions if a.op == "stop"]
    if starts:
        profiles = sorted({a.profile for a in starts})
        n = len(starts)
        return (
            f"the next pass would start {n} replica{'s' if n != 1 else ''} "
            f"(profile {', '.join(profiles)})"
        )
    if stops:
        n = len(stops)
        return f"the next pass would stop {n} replica{'s' if n != 1 else ''} ({stops[0].reason})"
    if live < desired:
        return f"{desired - live} more wanted; the next pass starts them, nothing stands in the way"
    if live > desired:
        return f"{live - desired} more than wanted; they will be stopped"
    if starting:
        return (
            f"it has what it wants; {starting} replica{'s' if starting != 1 else ''} still "
            "starting, not ready yet"
        )
    return "it has what it wants"
