"""Snapshot validation with operator-readable problems: one line per field, named by its path."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from scheduler.core.models import Snapshot
from scheduler.core.serve_spec import Serve


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


def upgrade_snapshot(data: object) -> tuple[object, list[str]]:
    """A snapshot saved before models had `serve` (they had `runtime` and `params`), in the
    current form, and a line saying what was converted (none for a current snapshot). Saved
    what-if files are a contract: fields may be added, none renamed, so an old one still loads.
    The decision never read either field: `params.hf_model` becomes `serve.source` (with the
    runtime), and the rest of `params` is left out."""
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(models, list):
        return data, []
    converted: list[str] = []
    new_models: list[Any] = []
    for model in models:
        if isinstance(model, dict) and ("params" in model or "runtime" in model):
            model = _serve_from_params(model)
            converted.append(str(model.get("name")))
        new_models.append(model)
    if not converted:
        return data, []
    names = ", ".join(converted[:5]) + (
        f" and {len(converted) - 5} more" if len(converted) > 5 else ""
    )
    note = (
        f"snapshot: saved before `serve`; params and runtime of {len(converted)} model(s) "
        f"({names}) converted to serve (the decision reads neither)"
    )
    return {**data, "models": new_models}, [note]


def _serve_from_params(model: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in model.items() if k not in ("params", "runtime")}
    params, runtime = model.get("params"), model.get("runtime", "vllm")
    source = params.get("hf_model") if isinstance(params, dict) else None
    if "serve" not in out and source is not None:
        try:
            serve = Serve.model_validate({"source": source, "runtime": runtime})
            out["serve"] = serve.model_dump(mode="json", exclude_defaults=True)
        except ValidationError:
            pass  # not a serve spec: left out, as the decision does not read it
    return out
