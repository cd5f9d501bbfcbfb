"""Each owner's decayed usage (docs/decision-core.md, rule F4), kept in one state key: read
into the snapshot every pass, written back from the plan by the leader.

A bad part of the key (an owner's entry that is not a usage record) is named by key and field
and left out of the snapshot, and written back as it was read: an operator's or another
version's value is never lost. A value that is not JSON at all is not written over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from scheduler.adapters.catalog import printable
from scheduler.adapters.json_bounds import bounded_loads
from scheduler.core.models import OwnerUsage, rfc3339
from scheduler.core.validate import format_validation_error

_USAGE: TypeAdapter[OwnerUsage] = TypeAdapter(OwnerUsage)


@dataclass
class UsageRead:
    """The key as read: the good entries, the bad ones as they were, and whether it may be
    written over."""

    usage: dict[str, OwnerUsage] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)  # bad entries, written back as read
    writable: bool = True


def parse_usage(entries: list[dict[str, Any]], key: str, problems: list[str]) -> UsageRead:
    """The usage key among a listing's entries. Absent: empty (nothing was kept yet)."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    if not raw:
        return UsageRead()
    try:
        data = bounded_loads(raw, 1 << 20)
    except ValueError as exc:
        problems.append(f"{key}: {printable(str(exc))}; left as it is")
        return UsageRead(writable=False)
    owners = data.get("owners") if isinstance(data, dict) else None
    if not isinstance(owners, dict):
        problems.append(f"{key}: owners: Input should be a JSON object; left as it is")
        return UsageRead(writable=False)
    out = UsageRead()
    for owner, value in owners.items():
        try:
            out.usage[str(owner)] = _USAGE.validate_python(value)
        except ValidationError as err:
            problems.extend(
                format_validation_error(err, root=f"{key}: owners.{printable(str(owner))}")
            )
            out.kept[str(owner)] = value
    return out


def usage_record(usage: dict[str, OwnerUsage], read: UsageRead) -> dict[str, Any] | None:
    """What to write to the key after a pass (None: leave it as it is)."""
    if not read.writable:
        return None
    owners: dict[str, Any] = dict(read.kept)
    for owner, u in usage.items():
        owners[owner] = {"gpu_s": round(u.gpu_s, 3), "at": rfc3339(u.at)}
    return {"owners": owners}
