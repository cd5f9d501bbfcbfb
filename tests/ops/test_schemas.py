from __future__ import annotations

import json

from scheduler.core.models import Model
from scheduler.ops import schemas


def test_shipped_schema_files_equal_the_generated_ones() -> None:
    generated = schemas.generate()
    assert set(generated) == {"model.schema.json", "quota.schema.json", "settings.schema.json"}
    assert schemas.shipped() == generated, "run `llm-scheduler schema --write`"


def test_model_schema_uses_the_operator_spelling_and_forbids_typos() -> None:
    schema = json.loads(schemas.generate()["model.schema.json"])
    assert "class" in schema["properties"] and "class_" not in schema["properties"]
    assert schema["additionalProperties"] is False
    # serve is required of what operators write (the core alone accepts models without it).
    assert set(schema["required"]) == {"name", "owner", "profiles", "serve"}
    assert schema["properties"]["name"]["pattern"] == Model.model_fields["name"].metadata[0].pattern
