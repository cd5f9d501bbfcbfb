"""Read catalog files (models, quotas; YAML or JSON, one item or many), validate every item with
the core's pydantic models before anything is written, then write changed keys with CAS."""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.contract_base import Record
from scheduler.core.models import Model, Quota, Settings
from scheduler.ops.catalog_problems import problems
from scheduler.serving.catalog_model import CatalogModel

Kind = Literal["models", "quotas"]


class CatalogError(ValueError):
    """A catalog file that cannot be applied; `lines` name every bad item and field."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def load_documents(path: str | Path, text: str | None = None) -> list[Any]:
    """Every YAML document in the file (JSON is YAML); `-` reads stdin."""
    import sys

    name = str(path)
    if text is None:
        if name == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(name).read_text(encoding="utf-8")
            except OSError as exc:
                raise CatalogError([f"cannot read {name}: {exc.strerror or exc}"]) from exc
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogError([f"{name} is not valid YAML or JSON{where}: {problem}"]) from exc


def _items(docs: Iterable[Any], kind: Kind) -> list[tuple[str, Any]]:
    """(where, raw item) for every item of `kind`: a bare item, a list, or {kind: [...]}."""
    found: list[tuple[str, Any]] = []
    for d, doc in enumerate(docs):
        base = f"document {d + 1}" if d else ""
        if isinstance(doc, dict) and kind in doc:
            entries = doc[kind]
            if isinstance(entries, dict) and kind == "quotas":
                # {"quotas": {"org/team-a": {...}}}: the owner is the key, as in Consul KV.
                entries = [{"owner": k, **(v or {})} for k, v in entries.items()]
            if not isinstance(entries, list):
                raise CatalogError([f"{base}{'.' if base else ''}{kind}: expected a list"])
            found += [(f"{base}{'.' if base else ''}{kind}[{i}]", e) for i, e in enumerate(entries)]
        elif isinstance(doc, list):
            found += [(f"{base}[{i}]", e) for i, e in enumerate(doc)]
        elif isinstance(doc, dict) and not ({"models", "quotas", "settings"} & doc.keys()):
            found.append((base or "item", doc))
    return found


def parse(docs: list[Any], kind: Kind) -> list[Model] | list[Quota]:
    """Validate every item; raise CatalogError listing all problems, or return the items."""
    # Models as the catalog holds them: `serve` required, extra flags checked (CatalogModel).
    cls: type[Model] | type[Quota] = CatalogModel if kind == "models" else Quota
    errors: list[str] = []
    parsed: list[Any] = []
    items = _items(docs, kind)
    if not items:
        raise CatalogError([f"no {kind} found in the file (expected an item, a list, or {kind}:)"])
    for where, raw in items:
        if not isinstance(raw, dict):
            errors.append(f"{where}: expected an object, got {type(raw).__name__}")
            continue
        found = problems(cls, raw)
        if found:
            label = raw.get("name") if kind == "models" else raw.get("owner")
            root = f"{where} ({label})" if isinstance(label, str) else where
            errors += [f"{root}: {line}" for line in found]
            continue
        parsed.append(cls.model_validate(raw))
    ident = [p.name if isinstance(p, Model) else p.owner for p in parsed]
    dupes = sorted({i for i in ident if ident.count(i) > 1})
    if dupes:
        errors.append(f"{kind} listed more than once: {', '.join(dupes)}")
    if errors:
        raise CatalogError(errors)
    return parsed


def kv_value(item: BaseModel | Record) -> dict[str, Any]:
    """What is stored in Consul: a model as is; a quota without its owner (the key names it)."""
    data = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(item, Quota):
        data.pop("owner", None)
    return data


def key_for(item: Model | Quota, kv: KVLayout) -> str:
    return kv.model_key(item.name) if isinstance(item, Model) else kv.quota_key(item.owner)


@dataclass(frozen=True)
class Change:
    key: str
    name: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None  # None: delete the key
    index: int  # ModifyIndex read before; 0 = the key must not exist yet (CAS)
    after: str = "file"  # what the diff's new side is: the file, or what a delete does

    @property
    def action(self) -> Literal["create", "update", "unchanged", "delete"]:
        if self.new is None:
            return "unchanged" if self.old is None else "delete"
        if self.old is None:
            return "create"
        return "unchanged" if self.old == self.new else "update"

    def diff(self) -> list[str]:
        def lines(obj: dict[str, Any] | None) -> list[str]:
            return [] if obj is None else json.dumps(obj, indent=2, sort_keys=True).splitlines()

        return list(
            difflib.unified_diff(
                lines(self.old),
                lines(self.new),
                f"{self.key} (consul)",
                f"{self.key} ({self.after})",
                "",
                "",
                2,
                "",
            )
        )


def _stored(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"<not JSON>": raw.decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"<not an object>": value}


def plan_changes(client: Any, kv: KVLayout, items: list[Model] | list[Quota]) -> list[Change]:
    changes = []
    for item in items:
        key = key_for(item, kv)
        _, entry = client.kv.get(key)
        old = _stored(entry["Value"]) if entry else None
        index = int(entry["ModifyIndex"]) if entry else 0
        name = item.name if isinstance(item, Model) else item.owner
        changes.append(Change(key, name, old, kv_value(item), index))
    return changes


def plan_deletes(client: Any, kv: KVLayout, names: list[str]) -> list[Change]:
    """Deleting models: the same diff and CAS as apply. The scheduler retires a deleted model
    (its replicas stop after settings.retire_grace_s)."""
    changes = []
    after = when_retired(client, kv)
    for name in names:
        key = kv.model_key(name)
        _, entry = client.kv.get(key)
        old = _stored(entry["Value"]) if entry else None
        index = int(entry["ModifyIndex"]) if entry else 0
        changes.append(Change(key, name, old, None, index, after))
    return changes


def when_retired(client: Any, kv: KVLayout) -> str:
    """When the replicas of a deleted model stop: settings.retire_grace_s after the scheduler
    sees the key gone (the default when settings are absent or unreadable)."""
    grace = Settings().retire_grace_s
    _, entry = client.kv.get(kv.settings)
    with contextlib.suppress(ValidationError):  # a bad value: `status` reports it
        grace = Settings.model_validate_json(entry["Value"]).retire_grace_s if entry else grace
    return f"deleted: its replicas stop {grace} s after the scheduler sees it (retire_grace_s)"


def write_changes(client: Any, changes: list[Change]) -> list[str]:
    """CAS-write every change that changes something; return the keys someone else changed
    since they were read."""
    conflicts = []
    for change in changes:
        if change.action == "unchanged":
            continue
        if change.new is None:
            done = client.kv.delete(change.key, cas=change.index)
        else:
            body = json.dumps(change.new, separators=(",", ":"))
            done = client.kv.put(change.key, body, cas=change.index)
        if not done:
            conflicts.append(change.key)
    return conflicts


def read_all(
    client: Any, prefix: str, cls: type[Model] | type[Quota]
) -> tuple[list[Any], list[str]]:
    """Every valid item under a prefix, and one line per bad value (never fatal to the others)."""
    _, entries = client.kv.get(prefix, recurse=True)
    items: list[Any] = []
    errors: list[str] = []
    for entry in entries or []:
        key = entry["Key"]
        tail = KVLayout.tail(key, prefix)
        if not tail or tail.startswith("_"):
            continue
        if entry["Value"] is None:
            continue
        try:
            value = json.loads(entry["Value"])
        except ValueError as exc:  # one clear line, not every field the model lacks
            errors.append(f"{key}: not valid JSON ({exc})")
            continue
        if not isinstance(value, dict):
            errors.append(f"{key}: expected a JSON object, got {type(value).__name__}")
            continue
        if cls is Quota:
            value = {"owner": tail, **value}
        found = problems(cls, value)
        if found:
            errors += [f"{key}: {line}" for line in found]
        else:
            items.append(cls.model_validate(value))
    return items, errors
