"""Snapshot validation with operator-readable problems: one line per field, named by its path."""

from __future__ import annotations

from pydantic import ValidationError

from scheduler.core.models import Snapshot


class SnapshotError(Exception):
    """A snapshot that does not validate; `problems` holds one line per bad field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


# A record (contract_base.Record, a pydantic dataclass) says this of an unknown key where a
# BaseModel says "Extra inputs are not permitted": operators read one wording for both.
_SAID_ALIKE = {"unexpected_keyword_argument": "Extra inputs are not permitted"}


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def format_validation_error(err: ValidationError, root: str = "") -> list[str]:
    """`models[2].class: Input should be ...`; with root, `root: scaling.min: ...`."""
    lines: list[str] = []
    for item in err.errors(include_url=False):
        msg = _SAID_ALIKE.get(str(item["type"]), str(item["msg"]))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        path = _path(tuple(item["loc"]))
        line = f"{path}: {msg}" if path else msg
        lines.append(f"{root}: {line}" if root else line)
    return lines


def parse_snapshot(data: object) -> Snapshot:
    """Validate decoded JSON into a Snapshot, or raise SnapshotError naming every bad field."""
    if not isinstance(data, dict):
        raise SnapshotError([f"snapshot: expected a JSON object, got {type(data).__name__}"])
    try:
        return Snapshot.model_validate(data)
    except ValidationError as err:
        raise SnapshotError(format_validation_error(err)) from None
