"""Operator- and gateway-written KV values (models/, quotas/, demand/, gateways/, settings) into
core models.

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
from scheduler.core.mig_geometry import GEOMETRIES
from scheduler.core.models import (
    NAME_PATTERN,
    OWNER_PATTERN,
    Demand,
    Model,
    Node,
    Quota,
    Settings,
)
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
    # Gateway instance -> its counts per model (scheduler/demand/gateways.py adds them up).
    gateways: dict[str, dict[str, Demand]] = field(default_factory=dict)
    bad_gateways: set[str] = field(default_factory=set)
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


def printable(text: str, limit: int = 160) -> str:
    """`text` fit for one line of a report: control characters escaped, long text cut."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def model_name_problem(name: str) -> str | None:
    """Why `name` (a key's tail) can never name a model, or None when it can. Demand keys are
    checked with it: a gateway writing any other name is told so by key."""
    if re.match(NAME_PATTERN, name):
        return None
    if "/" in name:
        return "a model name has no '/'"
    return (
        "not a model name (1 to 64 of a-z, 0-9, '.', '_', '-', starting and ending with a "
        "letter or digit)"
    )


def read_catalog(
    entries: list[dict[str, Any]] | None, layout: KVLayout, max_bytes: int = 64 * 1024
) -> Catalog:
    cat = Catalog()
    for entry in entries or []:
        raw_key = str(entry.get("Key", ""))
        if raw_key.endswith("/"):
            continue  # a folder marker made by `consul kv put dir/`
        key, value = printable(raw_key), entry.get("Value")  # key: as reports name it
        if raw_key.startswith(layout.models):
            _model(cat, key, layout.tail(raw_key, layout.models), value, max_bytes)
        elif raw_key.startswith(layout.quotas):
            _quota(cat, key, layout.tail(raw_key, layout.quotas), value, max_bytes)
        elif raw_key.startswith(layout.demand):
            _demand(cat, key, layout.tail(raw_key, layout.demand), value, max_bytes)
        elif raw_key.startswith(layout.gateways):
            _gateway(cat, key, layout.tail(raw_key, layout.gateways), value, max_bytes)
        elif raw_key == layout.settings:
            _settings(cat, key, value, max_bytes)
    _demand_without_model(cat, layout)
    return cat


def _demand_without_model(cat: Catalog, layout: KVLayout) -> None:
    """Demand for a model the catalog does not hold counts for nothing: say so, once a pass
    (the status record is rewritten only when its content changes)."""
    for name in sorted(cat.demand.keys() - cat.models.keys() - cat.bad_models):
        cat.error(
            GENERAL,
            f"{layout.demand_key(name)}: no model {name!r} in the catalog "
            f"({layout.model_key(name)}): this demand counts for nothing",
        )


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
    bad_name = model_name_problem(name)
    if bad_name is not None:
        cat.error(GENERAL, f"{key}: {bad_name}")
        return
    value, problem = _decode(key, raw, max_bytes)
    target = name
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


def _gateway(cat: Catalog, key: str, instance: str, raw: Any, max_bytes: int) -> None:
    """`{"instance": ..., "models": {<model>: {inflight, queued, last_used}}}`. A bad value,
    or a bad entry in it, keeps the instance's last good counts (scheduler/demand/gateways.py):
    less demand than there is could stop replicas."""
    value, problem = _decode(key, raw, max_bytes)
    models = value.get("models") if isinstance(value, dict) else None
    if problem is None and not isinstance(models, dict):
        problem = f"{key}: models: Input should be a JSON object"
    if problem is not None or not isinstance(models, dict):
        cat.error(GENERAL, problem or key)
        cat.bad_gateways.add(instance)
        return
    counts: dict[str, Demand] = {}
    for name, item in models.items():
        demand, lines = _validate(Demand, f"{key}: models.{name}", item)
        for line in lines:
            cat.error(GENERAL, line)
        if demand is None:
            cat.bad_gateways.add(instance)
            return
        counts[str(name)] = demand
    cat.gateways[instance] = counts


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


def warn_unknown_gpu_models(
    cat: Catalog, models: list[Model], nodes: list[Node], layout: KVLayout
) -> None:
    """A `gpu_models` entry that is part of no GPU model name in the fleet or the MIG table is
    most likely a typo, but a fleet may be about to add such GPUs: a warning in the model's
    status, not an error (the model is read as written)."""
    known = {g.model for n in nodes for g in n.gpus} | {b.display_name for b in GEOMETRIES}
    for model in models:
        for i, profile in enumerate(model.profiles):
            for j, wanted in enumerate(profile.gpu_models or ()):
                if not any(wanted in name for name in known):
                    cat.error(
                        model.name,
                        f"{layout.model_key(model.name)}: profiles[{i}].gpu_models[{j}]: "
                        f"{wanted!r} is part of no GPU model in the fleet or the MIG table "
                        "(a warning: the profile waits for such a GPU)",
                    )
