"""Every problem of a catalog item in one go, one line each, with the near name for a typo.

Pydantic stops at the first failing layer: an item's cross-field rules (`scaling: min > max`)
and the catalog's flag check run only once every field is valid, so a file fixed line by line
would show its problems in rounds. Each part of the item (scaling, profiles, serve, guarantee,
limit) is also validated on its own, and the runtime's flags checked as soon as `serve` is valid.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from scheduler.serving.flags import flag_problems

# A record (a pydantic dataclass) says this of an unknown key where a BaseModel says "Extra
# inputs are not permitted": operators read one wording for both.
UNKNOWN_KEY = {"unexpected_keyword_argument", "extra_forbidden"}
FLAGS_PREFIX = "serve.extra_args."
ROUNDS = 4


def _fields(cls: Any) -> dict[str, FieldInfo]:
    found = getattr(cls, "__pydantic_fields__", None)
    return dict(found) if isinstance(found, dict) else {}


def _record_in(annotation: Any) -> Any:
    """The record class an annotation holds (Scaling | None, list[Profile]), if any."""
    if _fields(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _record_in(arg)
        if found is not None:
            return found
    return None


def _by_key(cls: Any) -> dict[str, FieldInfo]:
    """Fields by the key an operator writes (the alias where there is one: `class`)."""
    return {(info.alias or name): info for name, info in _fields(cls).items()}


def _class_at(cls: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        if isinstance(part, int):
            continue
        info = _by_key(cls).get(part)
        cls = _record_in(info.annotation) if info else None
        if cls is None:
            return None
    return cls


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _line(cls: Any, item: Any, prefix: tuple[int | str, ...]) -> str:
    loc = (*prefix, *item["loc"])
    message = str(item["msg"]).removeprefix("Value error, ")
    if item["type"] in UNKNOWN_KEY:
        message = "Extra inputs are not permitted"
        known = list(_by_key(_class_at(cls, loc[:-1])))
        near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        if near:
            message += f" (did you mean {near[0]}?)"
    path = _path(loc)
    return f"{path}: {message}" if path else message


def _validate(cls: Any, annotation: Any, value: Any, prefix: tuple[int | str, ...]) -> list[str]:
    """The problems of `value`; then, while keys that have a default failed, the problems left
    once those keys are dropped (a record's own cross-field rule runs only on valid fields)."""
    lines: list[str] = []
    record = _record_in(annotation)
    for _ in range(ROUNDS):
        try:
            TypeAdapter(annotation).validate_python(value)
        except ValidationError as err:
            found = err.errors(include_url=False)
            lines += [_line(cls, item, prefix) for item in found]
            value = _without_failed(record, value, found)
            if value is None:
                break
        else:
            break
    return lines


def _without_failed(record: Any, value: Any, found: list[Any]) -> dict[str, Any] | None:
    """`value` less its failed keys that have a default; None when there is none to drop."""
    if record is None or not isinstance(value, dict):
        return None
    optional = {k for k, info in _by_key(record).items() if not info.is_required()}
    failed = {item["loc"][0] for item in found if item["loc"]} & optional & value.keys()
    if not failed:
        return None
    return {k: v for k, v in value.items() if k not in failed}


def problems(cls: Any, raw: dict[str, Any]) -> list[str]:
    """One line per problem (`scaling: min (3) is greater than max (1)`); [] when valid."""
    lines = _validate(cls, cls, raw, ())
    if not lines:
        return []
    # The flag check joins its findings into one line; they are listed one by one below.
    lines = [line for line in lines if not line.startswith(FLAGS_PREFIX)]
    for key, info in _by_key(cls).items():
        part, value = _record_in(info.annotation), raw.get(key)
        if part is None or value is None:
            continue
        if isinstance(value, list):
            for i, element in enumerate(value):
                lines += _validate(cls, part, element, (key, i))
        else:
            lines += _validate(cls, info.annotation, value, (key,))
    serve = _by_key(cls).get("serve")
    if serve is not None and isinstance(raw.get("serve"), dict):
        lines += _flag_lines(serve.annotation, raw["serve"])
    return list(dict.fromkeys(lines))


def _flag_lines(annotation: Any, raw: dict[str, Any]) -> list[str]:
    try:
        serve = TypeAdapter(annotation).validate_python(raw)
    except ValidationError:
        return []
    found = flag_problems(serve.runtime, list(serve.extra_args))
    return [f"{FLAGS_PREFIX}{flag}: {why}" for flag, why in found]
