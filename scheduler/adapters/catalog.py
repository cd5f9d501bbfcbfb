"""Operator- and gateway-written KV values (models/, quotas/, demand/, settings) into core models.

Every value is checked on its own; a bad one becomes an error line naming the key and field
(`llm-scheduler/models/llama: scaling.min: Input should be greater than or equal to 0`) and
the others go on. Errors are filed under the model they concern, or `_errors`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from pydantic import ValidationError

from scheduler.adapters.interning import intern_fields, intern_model
from scheduler.adapters.json_bounds import BoundsError, bounded_loads
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import OWNER_PATTERN, Demand, Model, Quota, Settings
from scheduler.core.validate import format_validation_error
from scheduler.serving.catalog_model import CatalogModel

GENERAL = "_errors"


class _Validated(Protocol):
    """A pydantic model or record of the contract: what the catalog reads its values into."""

    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...


T = TypeVar("T", bound=_Validated)


def validation_lines(err: ValidationError, key: str) -> list[str]:
    return format_validation_error(err, root=key)


@dataclass
class Catalog:
    models: dict[str, Model] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    demand: dict[str, Demand] = field(default_factory=dict)
    settings: Settings | None = None
    # target (model name or GENERAL) -> error lines
    errors: dict[str, list[str]] = field(default_factory=dict)
    bad_models: set[str] = field(default_factory=set)  # model or demand value unusable
    bad_quotas: set[str] = field(default_factory=set)  # owner paths whose quota is unusable
    bad_settings: bool = False

    def error(self, target: str, line: str) -> None:
        self.errors.setdefault(target, []).append(line)

    def all_errors(self) -> list[str]:
        return [line for lines in self.errors.values() for line in lines]


def _decode(key: str, raw: Any, max_bytes: int) -> tuple[Any, str | None]:
    try:
        return bounded_loads(raw, max_bytes), None
    except BoundsError as exc:
        return None, f"{key}: {exc}"


def _validate(cls: type[T], key: str, value: Any) -> tuple[T | None, list[str]]:
    try:
        return cls.model_validate(value), []
    except ValidationError as err:
        return None, validation_lines(err, key)


def read_catalog(
    entries: list[dict[str, Any]] | None, layout: KVLayout, max_bytes: int = 64 * 1024
) -> Catalog:
    cat = Catalog()
    for entry in entries or []:
        key = str(entry.get("Key", ""))
        if key.endswith("/"):
            continue  # a folder marker made by `consul kv put dir/`
        if key.startswith(layout.models):
            _model(cat, key, layout.tail(key, layout.models), entry.get("Value"), max_bytes)
        elif key.startswith(layout.quotas):
            _quota(cat, key, layout.tail(key, layout.quotas), entry.get("Value"), max_bytes)
        elif key.startswith(layout.demand):
            _demand(cat, key, layout.tail(key, layout.demand), entry.get("Value"), max_bytes)
        elif key == layout.settings:
            _settings(cat, key, entry.get("Value"), max_bytes)
    return cat


def _model(cat: Catalog, key: str, name: str, raw: Any, max_bytes: int) -> None:
    target = name if re.match(r"^[a-z0-9._-]{1,64}$", name) else GENERAL
    value, problem = _decode(key, raw, max_bytes)
    if problem is None and isinstance(value, dict):
        value.setdefault("name", name)
        if value["name"] != name:
            problem = f"{key}: name: {value['name']!r} does not match the key's name {name!r}"
        else:  # one string object with the replicas' model names, and so on (interning.py)
            intern_model(value)
    elif problem is None:
        problem = f"{key}: Input should be a JSON object"
    model = None
    if problem is None:
        # CatalogModel: the core Model plus a required, checked `serve` (what to run).
        model, lines = _validate(CatalogModel, key, value)
        for line in lines:
            cat.error(target, line)
    else:
        cat.error(target, problem)
    if model is None:
        cat.bad_models.add(name)
    else:
        cat.models[name] = model


def _quota(cat: Catalog, key: str, owner: str, raw: Any, max_bytes: int) -> None:
    value, problem = _decode(key, raw, max_bytes)
    if problem is None and not re.match(OWNER_PATTERN, owner):
        problem = f"{key}: owner path {owner!r} is not a valid owner path"
    if problem is None and not isinstance(value, dict):
        problem = f"{key}: Input should be a JSON object"
    if problem is None and isinstance(value, dict):
        value.setdefault("owner", owner)
        if value["owner"] != owner:
            problem = f"{key}: owner: {value['owner']!r} disagrees with the key's owner {owner!r}"
        intern_fields(value, "owner")
    quota = None
    if problem is None:
        quota, lines = _validate(Quota, key, value)
        for line in lines:
            cat.error(GENERAL, line)
    else:
        cat.error(GENERAL, problem)
    if quota is None:
        cat.bad_quotas.add(owner)
    else:
        cat.quotas[owner] = quota


def _demand(cat: Catalog, key: str, name: str, raw: Any, max_bytes: int) -> None:
    value, problem = _decode(key, raw, max_bytes)
    target = name if re.match(r"^[a-z0-9._-]{1,64}$", name) else GENERAL
    if problem is not None:
        cat.error(target, problem)
        cat.bad_models.add(name)
        return
    demand, lines = _validate(Demand, key, value)
    for line in lines:
        cat.error(target, line)
    if demand is None:
        cat.bad_models.add(name)
    else:
        cat.demand[name] = demand


def _settings(cat: Catalog, key: str, raw: Any, max_bytes: int) -> None:
    value, problem = _decode(key, raw, max_bytes)
    if problem is not None:
        cat.error(GENERAL, problem)
        cat.bad_settings = True
        return
    settings, lines = _validate(Settings, key, value)
    for line in lines:
        cat.error(GENERAL, line)
    cat.settings = settings
    cat.bad_settings = settings is None
