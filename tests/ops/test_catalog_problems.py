"""Every problem of a catalog file in one go, one line each, counted right, with the near name
for a typo: not in rounds (fields first, then `min > max`, then the runtime's flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.ops import catalog_io

MODELS = """
models:
  - name: chat
    owner: org/a
    class: importnt
    scaling: {min: 3, max: 1, target_per_replica: 0}
    load_grace_s: -5
    profiles:
      - {name: p, gpus: 1, gpu_memory_gb: many, cpu_cores: x}
      - {name: m, mig_profile: 1g.10gb, gpus: 2}
    serve:
      source: org/x
      extra_args: {--no-such-flag: true, --nor-this: 1}
"""

QUOTAS = """
quotas:
  - {owner: org/a, guarantee: {gpu: 3}}
  - {owner: org/b, weight: 0, guarantee: {gpus: 3}, limit: {gpus: 2}}
"""


def _lines(text: str, kind: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    with pytest.raises(catalog_io.CatalogError) as err:
        catalog_io.parse(catalog_io.load_documents(path), kind)  # type: ignore[arg-type]
    return err.value.lines


def test_every_problem_of_a_model_is_reported_at_once(tmp_path: Path) -> None:
    lines = _lines(MODELS, "models", tmp_path)
    root = "models[0] (chat): "
    assert all(line.startswith(root) for line in lines)
    said = [line.removeprefix(root) for line in lines]
    expected = [
        "class: ",
        "scaling.target_per_replica: ",
        "profiles[0].gpu_memory_gb: ",
        "profiles[0].cpu_cores: ",
        "load_grace_s: ",
        "scaling: min (3) is greater than max (1)",
        "profiles[1]: a mig_profile profile takes exactly one slice",
        "serve.extra_args.--no-such-flag: not a flag of vllm",
        "serve.extra_args.--nor-this: not a flag of vllm",
    ]
    for start in expected:
        assert sum(line.startswith(start) for line in said) == 1, (start, said)
    assert len(lines) == len(expected), said


def test_quota_problems_at_once_with_the_near_name(tmp_path: Path) -> None:
    lines = _lines(QUOTAS, "quotas", tmp_path)
    assert lines == [
        "quotas[0] (org/a): guarantee.gpu: Extra inputs are not permitted (did you mean gpus?)",
        "quotas[1] (org/b): weight: Input should be greater than 0",
        "quotas[1] (org/b): guarantee.gpus (3) is larger than limit.gpus (2): an owner cannot "
        "be guaranteed more than it may hold",
    ]


def test_a_typo_at_the_top_or_in_a_profile_gets_its_near_name(tmp_path: Path) -> None:
    text = (
        "- {name: a, owner: o, clas: critical, profiles: [{name: p, gpu_memory: 40}],"
        " serve: {source: o/m, extra_arg: {}}}\n"
    )
    lines = _lines(text, "models", tmp_path)
    assert "[0] (a): clas: Extra inputs are not permitted (did you mean class?)" in lines
    assert any(
        "profiles[0].gpu_memory: " in x and "(did you mean gpu_memory_gb?)" in x for x in lines
    )
    assert any("serve.extra_arg: " in x and "(did you mean extra_args?)" in x for x in lines)
    assert len(lines) == 3, lines


def test_the_header_counts_every_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from scheduler.cli import app

    path = tmp_path / "catalog.yaml"
    path.write_text(MODELS)
    result = CliRunner().invoke(app, ["models", "apply", "-f", str(path), "--dry-run"])
    assert result.exit_code == 1
    detail = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert f"has {len(detail)} problems, nothing was written" in result.stderr
    assert len(detail) == 9
