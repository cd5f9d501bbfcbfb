"""JSON Schemas of what operators and gateways write (models, quotas, settings, demand),
generated from the core's pydantic models and shipped in scheduler/data/schemas/ for editors,
CI linters and gateway authors."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from scheduler.core.contract_base import Record
from scheduler.core.models import Demand, Quota, Settings
from scheduler.serving.catalog_model import CatalogModel

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# file name -> (model, title, what the file describes)
SCHEMAS: dict[str, tuple[type[BaseModel] | type[Record], str, str]] = {
    "model.schema.json": (
        CatalogModel,
        "llm-scheduler model",
        "Consul KV llm-scheduler/models/<name>",
    ),
    "quota.schema.json": (
        Quota,
        "llm-scheduler quota",
        "an item of `quotas apply -f`; in Consul KV llm-scheduler/quotas/<owner> without owner",
    ),
    "settings.schema.json": (
        Settings,
        "llm-scheduler settings",
        "Consul KV llm-scheduler/settings",
    ),
    "demand.schema.json": (
        Demand,
        "llm-scheduler demand",
        "Consul KV llm-scheduler/demand/<model>, written by gateways: requests in flight and "
        "queued for the model now, and when it last served one (RFC 3339 with a time zone); "
        "a missing field counts as 0 (or never used)",
    ),
}


def generate() -> dict[str, str]:
    """File name -> schema text, exactly as shipped (stable key order, trailing newline)."""
    out: dict[str, str] = {}
    for name, (model, title, description) in SCHEMAS.items():
        schema: dict[str, Any] = {
            "$schema": SCHEMA_DIALECT,
            **model.model_json_schema(by_alias=True, mode="validation"),
        }
        schema["title"] = title
        schema["description"] = description
        out[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def shipped_dir() -> Path:
    return Path(str(resources.files("scheduler") / "data" / "schemas"))


def shipped() -> dict[str, str]:
    folder = shipped_dir()
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.schema.json"))}


def write(folder: Path | None = None) -> list[Path]:
    folder = folder or shipped_dir()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generate().items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
