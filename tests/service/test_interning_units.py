"""Interning what the pass looks up (scheduler/adapters/interning.py): strings become one object
each; anything else, however odd, is left for validation to report by key and field."""

from __future__ import annotations

import json
import sys
from typing import Any

from scheduler.adapters.catalog import read_catalog
from scheduler.adapters.interning import intern_fields, intern_model
from scheduler.adapters.kv_layout import KVLayout

LAYOUT = KVLayout()


def fresh(text: str) -> str:
    """An equal string that is not the interned object (json.loads makes such ones)."""
    out: str = json.loads(json.dumps(text))
    return out


def test_strings_become_the_interned_object_and_the_rest_is_left_alone() -> None:
    doc: dict[str, Any] = {"owner": fresh("org/team-a"), "class": 3, "name": None}
    intern_fields(doc, "owner", "class", "name", "missing")
    assert doc["owner"] is sys.intern("org/team-a")
    assert doc == {"owner": "org/team-a", "class": 3, "name": None}
    for odd in (None, [], "text", 7):
        intern_fields(odd, "owner")  # not a document: nothing to do, nothing raised

    class Text(str):
        pass

    sub = {"owner": Text("org/a")}
    intern_fields(sub, "owner")  # sys.intern would raise on a str subclass: left as it is
    assert type(sub["owner"]) is Text


def test_hostile_model_documents_are_left_for_validation() -> None:
    odd: list[Any] = [
        {"profiles": "p"},
        {"profiles": [None, 3, "x", {"name": 4, "gpu_models": "H100"}]},
        {"profiles": [{"gpu_models": [1, None, fresh("NVIDIA H100 80GB HBM3")]}]},
        ["not", "a", "dict"],
        None,
    ]
    for doc in odd:
        intern_model(doc)
    assert odd[1]["profiles"] == [None, 3, "x", {"name": 4, "gpu_models": "H100"}]
    models = odd[2]["profiles"][0]["gpu_models"]
    assert models[:2] == [1, None] and models[2] is sys.intern("NVIDIA H100 80GB HBM3")


def _kv(key: str, value: object) -> dict[str, Any]:
    return {"Key": LAYOUT.prefix + key, "Value": json.dumps(value).encode(), "ModifyIndex": 1}


def test_a_catalog_shares_owners_and_profile_names_and_still_reports_bad_ones() -> None:
    def model(owner: object) -> dict[str, Any]:
        profiles = [{"name": "tp2", "gpus": 2, "gpu_models": ["H100"]}]
        return {"owner": owner, "profiles": profiles, "serve": {"source": "org/m"}}

    entries = [
        _kv("models/a", model("org/team-a")),
        _kv("models/b", model("org/team-a")),
        _kv("models/bad", model(123)),
        _kv("quotas/org/team-a", {"guarantee": {"gpus": 4}}),
    ]
    cat = read_catalog(entries, LAYOUT)
    a, b = cat.models["a"], cat.models["b"]
    assert a.owner is b.owner is cat.quotas["org/team-a"].owner
    assert a.profiles[0].name is b.profiles[0].name
    assert a.profiles[0].gpu_models is not None and b.profiles[0].gpu_models is not None
    assert a.profiles[0].gpu_models[0] is b.profiles[0].gpu_models[0]
    assert "bad" not in cat.models and "bad" in cat.bad_models
    assert any(": owner:" in line for line in cat.errors["bad"]), cat.errors["bad"]
