"""First rules of the core: validation paths, scaling, placement, scale-down, determinism, CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.core.decide import decide
from scheduler.core.models import StartAction, StopAction
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import SnapshotError, parse_snapshot


def _snap(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "now": "2026-12-02T10:00:00Z",
        "nodes": [
            {
                "id": "n1",
                "name": "a",
                "cpu_cores": 64,
                "memory_gb": 512,
                "gpus": [
                    {"id": f"G{i}", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80}
                    for i in range(8)
                ],
            }
        ],
        "models": [
            {
                "name": "llama",
                "owner": "org/a",
                "class": "critical",
                "scaling": {"min": 1, "max": 4},
                "profiles": [{"name": "tp4", "gpus": 4, "gpu_models": ["H100"], "cpu_cores": 16}],
            }
        ],
        "demand": {"llama": {"inflight": 50, "queued": 10}},
    }
    base.update(over)
    return base


def test_bad_class_names_field_path() -> None:
    data = _snap()
    data["models"][0]["class"] = "gold"
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(data)
    assert err.value.problems[0].startswith("models[0].class: Input should be 'critical'")


def test_places_what_fits_and_reports_the_rest() -> None:
    plan = decide(parse_snapshot(_snap()))
    starts = [a for a in plan.actions if isinstance(a, StartAction)]
    assert len(starts) == 2
    gpus = [g for a in starts for s in a.shards for g in s.gpus]
    assert len(gpus) == len(set(gpus)) == 8
    status = plan.models["llama"]
    assert status.desired == 4 and status.live == 0
    assert status.pending is not None and "too few free GPUs" in status.pending


def test_deterministic_and_converges() -> None:
    snap = parse_snapshot(_snap())
    assert decide(snap).model_dump_json() == decide(snap).model_dump_json()
    after = apply_plan(snap, decide(snap))
    assert not decide(after).actions


def test_scale_down_newest_first() -> None:
    snap = parse_snapshot(_snap())
    after = apply_plan(snap, decide(snap), advance_s=60)
    # No stabilisation window here (it has its own tests): the drop acts at once.
    settings = after.settings.model_copy(update={"scale_down_window_s": 0})
    idle = after.model_copy(update={"demand": {}, "settings": settings})
    plan = decide(idle)
    stops = [a for a in plan.actions if isinstance(a, StopAction)]
    assert len(stops) == 1 and plan.models["llama"].desired == 1


def test_cli_exit_2_on_bad_snapshot(tmp_path: Any) -> None:
    data = _snap()
    data["models"][0]["class"] = "gold"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["plan", "--snapshot", str(path)])
    assert result.exit_code == 2
    assert "models[0].class" in result.output


def test_mig_slice_and_quota_limit() -> None:
    node = {
        "id": "m1",
        "name": "m",
        "cpu_cores": 32,
        "memory_gb": 256,
        "gpus": [
            {
                "id": "G0",
                "model": "NVIDIA A100-SXM4-40GB",
                "memory_gb": 40,
                "mig": [
                    {"id": f"MIG-{i}", "profile": "3g.20gb", "memory_gb": 20} for i in range(2)
                ],
            }
        ],
    }
    model = {
        "name": "small",
        "owner": "org/b",
        "scaling": {"min": 2, "max": 2},
        "profiles": [{"name": "mig", "mig_profile": "3g.20gb"}],
    }
    data = _snap(
        nodes=[node], models=[model], demand={}, quotas=[{"owner": "org", "limit": {"gpus": 0.5}}]
    )
    plan = decide(parse_snapshot(data))
    starts = [a for a in plan.actions if isinstance(a, StartAction)]
    assert [s.shards[0].gpus for s in starts] == [["MIG-0"]]
    assert "quota limit of org reached" in (plan.models["small"].pending or "")
