from __future__ import annotations

import json

import pytest

from scheduler.core.models import NAME_PATTERN
from scheduler.ops import schemas


def test_shipped_schema_files_equal_the_generated_ones() -> None:
    generated = schemas.generate()
    assert set(generated) == {
        "model.schema.json", "quota.schema.json", "settings.schema.json", "demand.schema.json",
    }  # fmt: skip
    assert schemas.shipped() == generated, "run `llm-scheduler schema --write`"


def test_model_schema_uses_the_operator_spelling_and_forbids_typos() -> None:
    schema = json.loads(schemas.generate()["model.schema.json"])
    assert "class" in schema["properties"] and "class_" not in schema["properties"]
    assert schema["additionalProperties"] is False
    # serve is required of what operators write (the core alone accepts models without it).
    assert set(schema["required"]) == {"name", "owner", "profiles", "serve"}
    assert schema["properties"]["name"]["pattern"] == NAME_PATTERN


def test_demand_schema_is_what_the_scheduler_accepts_from_gateways() -> None:
    from scheduler.core.models import Demand

    schema = json.loads(schemas.generate()["demand.schema.json"])
    assert "llm-scheduler/demand/<model>" in schema["description"]
    assert set(schema["properties"]) == set(Demand.model_fields) == {
        "inflight", "queued", "last_used",
    }  # fmt: skip
    assert schema["additionalProperties"] is False and "required" not in schema
    assert schema["properties"]["inflight"]["minimum"] == 0
    assert schema["properties"]["queued"]["minimum"] == 0
    assert {"format": "date-time", "type": "string"} in schema["properties"]["last_used"]["anyOf"]
    # The documented example is valid, and a typo is refused as the schema says.
    Demand.model_validate_json('{"inflight": 3, "queued": 1, "last_used": "2026-12-02T10:00:00Z"}')
    with pytest.raises(ValueError, match="queue"):
        Demand.model_validate({"inflight": 1, "queue": 2})
