"""Strings the decision pass looks up or compares, made one object each (sys.intern).

A snapshot read from JSON has a string object per occurrence: each allocation's NodeID, each
GPU's model name, each model's owner. The pass looks these up in dicts and compares them every
pass; when both sides are one object the lookup matches on identity, without comparing the
characters or reading a second string from memory. The adapters intern what the pass reads
this way (nomad_nodes.py, nomad_jobs.py, catalog.py); bench/snapshot_layout.py measures what it
is worth. An interned string is freed like any other once nothing holds it.
"""

from __future__ import annotations

from sys import intern
from typing import Any

__all__ = ["intern", "intern_fields", "intern_model"]


def intern_fields(doc: Any, *names: str) -> None:
    """Intern doc[name] for each name whose value is a string. Anything else is left as it is,
    for validation to report by key and field."""
    if not isinstance(doc, dict):
        return
    for name in names:
        value = doc.get(name)
        if type(value) is str:  # sys.intern refuses a str subclass
            doc[name] = intern(value)


def intern_model(model: Any) -> None:
    """A catalog model document's owner, class and, per profile, its name, MIG profile and GPU
    models, interned where they are strings."""
    intern_fields(model, "name", "owner", "class")
    profiles = model.get("profiles") if isinstance(model, dict) else None
    for profile in profiles if isinstance(profiles, list) else ():
        intern_fields(profile, "name", "mig_profile")
        models = profile.get("gpu_models") if isinstance(profile, dict) else None
        if isinstance(models, list):
            profile["gpu_models"] = [intern(m) if type(m) is str else m for m in models]
