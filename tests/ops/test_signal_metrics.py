"""The service's metrics: each model's scaling signals and what they ask for, one metric per
quantity in base units; GPUs by state that add up; leader and build; input errors counted once;
names and HELP that `promtool check metrics` accepts."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from ops_helpers import snapshot_and_plan

from scheduler.core.models import Load, ModelStatus, Plan, Snapshot
from scheduler.ops.metrics import SIGNAL_METRICS, MetricsObserver


def _snap(load: dict[str, Load]) -> Snapshot:
    return Snapshot(now=datetime(2026, 12, 2, 10, 0, tzinfo=UTC), load=load)


def _value(obs: MetricsObserver, name: str, **labels: str) -> float | None:
    return obs.registry.get_sample_value(name, labels)


def test_signals_per_model_are_exported_in_base_units_and_forgotten() -> None:
    obs = MetricsObserver()
    plan = Plan(models={"chat": ModelStatus(desired=3, live=2, recommended=3)})
    load = Load(ttft_p90_ms=840, itl_p90_ms=25, kv_cache=0.41, tokens_per_s=900, reporting=2)
    obs.pass_finished(_snap({"chat": load}), plan, 0.1, [])
    assert _value(obs, "llm_scheduler_model_time_to_first_token_p90_seconds", model="chat") == (
        pytest.approx(0.84)
    )
    assert _value(obs, "llm_scheduler_model_inter_token_latency_p90_seconds", model="chat") == (
        pytest.approx(0.025)
    )
    assert _value(obs, "llm_scheduler_model_kv_cache_usage_ratio", model="chat") == 0.41
    assert _value(obs, "llm_scheduler_model_generation_tokens_per_second", model="chat") == 900
    assert _value(obs, "llm_scheduler_model_replicas_reporting", model="chat") == 2
    assert _value(obs, "llm_scheduler_replicas_recommended", model="chat") == 3
    text = obs.exposition().decode()
    assert "llm_scheduler_model_requests_running{" not in text  # no reading, no series
    assert "llm_scheduler_model_signal" not in text  # no metric mixes quantities
    obs.pass_finished(_snap({}), Plan(), 0.1, [])
    text = obs.exposition().decode()
    assert 'model="chat"' not in text


def test_every_signal_the_core_sees_has_its_metric() -> None:
    assert set(SIGNAL_METRICS) == set(Load.model_fields) - {"complete"}


def test_gpu_states_add_up_to_the_fleet() -> None:
    obs = MetricsObserver()
    snap, plan = snapshot_and_plan()
    obs.pass_finished(snap, plan, 0.01, [])
    text = obs.exposition().decode()
    assert 'state="total"' not in text
    assert _value(obs, "llm_scheduler_gpus", state="allocated") == 4
    assert _value(obs, "llm_scheduler_gpus", state="free") == 48 - 2 - 4
    assert _value(obs, "llm_scheduler_mig_slices", state="free") == 6 - 1


def test_an_input_error_is_counted_once_while_it_stands() -> None:
    obs = MetricsObserver()
    snap, plan = snapshot_and_plan()
    bad = "llm-scheduler/models/bad: class: invalid"
    other = "llm-scheduler/demand/x: inflight: not a number"
    for _ in range(20):
        obs.pass_finished(snap, plan, 0.01, [bad])
        obs.pass_carried(0.001, [bad])
    assert _value(obs, "llm_scheduler_errors_total", kind="input") == 1
    assert _value(obs, "llm_scheduler_input_errors") == 1
    obs.pass_finished(snap, plan, 0.01, [bad, other])
    assert _value(obs, "llm_scheduler_errors_total", kind="input") == 2
    assert _value(obs, "llm_scheduler_input_errors") == 2
    obs.pass_finished(snap, plan, 0.01, [])
    assert _value(obs, "llm_scheduler_input_errors") == 0
    obs.pass_finished(snap, plan, 0.01, [bad])  # it came back: a new occurrence
    assert _value(obs, "llm_scheduler_errors_total", kind="input") == 3


def test_leader_and_build_info() -> None:
    from importlib.metadata import version

    import scheduler

    obs = MetricsObserver()
    leader = SimpleNamespace(is_leader=False)
    obs.attach(SimpleNamespace(health=dict, leader=leader))
    assert _value(obs, "llm_scheduler_leader") == 0
    leader.is_leader = True
    assert _value(obs, "llm_scheduler_leader") == 1
    build = {"version": version("llm-scheduler"), "core": scheduler.CORE_BUILD}
    assert _value(obs, "llm_scheduler_build_info", **build) == 1


def test_help_names_only_series_that_exist() -> None:
    obs = MetricsObserver()
    snap, plan = snapshot_and_plan()
    obs.pass_finished(snap, plan, 0.01, ["k: bad"])
    text = obs.exposition().decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    for line in text.splitlines():
        if line.startswith("# HELP"):
            for word in line.replace(",", " ").replace(".", " ").split():
                if word.startswith("llm_scheduler_") and word != line.split()[2]:
                    assert word in names, line


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus)")
def test_promtool_accepts_the_exposition() -> None:
    obs = MetricsObserver()
    snap, plan = snapshot_and_plan()
    plan.models["llama-70b"] = plan.models["llama-70b"].model_copy(update={"recommended": 2})
    load = Load(ttft_p90_ms=840, running=3, waiting=1, tokens_per_s=10, reporting=1)
    obs.pass_finished(snap.model_copy(update={"load": {"llama-70b": load}}), plan, 0.01, ["k"])
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=obs.exposition(), capture_output=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert checked.stdout.decode() + checked.stderr.decode() == ""
