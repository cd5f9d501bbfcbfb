"""`llm-scheduler mig plan` and `mig apply` (against the fake NVML)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.core.mig_geometry import Layout
from scheduler.reporter.fake_gpus import a100_mig_fleet, h100_fleet
from scheduler.reporter.fake_nvml import FakeNvml
from scheduler.reporter.mig_apply import MigApplyError, apply_mig_layout
from scheduler.reporter.probe import NvmlProbe

runner = CliRunner()


def test_plan_prints_the_layout_as_json() -> None:
    result = runner.invoke(
        app, ["mig", "plan", "--gpu", "NVIDIA A100-SXM4-80GB", "--want", "3g.40gb=1,4g.40gb=1"]
    )
    assert result.exit_code == 0, result.output
    layout = Layout.model_validate_json(result.stdout)
    assert {(i.profile, i.start) for i in layout.instances} == {("4g.40gb", 0), ("3g.40gb", 4)}
    assert json.loads(result.stdout)["geometry"] == "a100-80gb"


def test_plan_explains_an_impossible_request_in_one_line() -> None:
    result = runner.invoke(
        app, ["mig", "plan", "--gpu", "NVIDIA A100-SXM4-80GB", "--want", "3g.40gb=3"]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == "3g.40gb=3: at most 2 fit on NVIDIA A100-SXM4-80GB"
    assert result.stdout == ""


@pytest.mark.parametrize("want", ["3g.40gb", "3g.40gb=x", "3g.40gb=1,3g.40gb=1"])
def test_plan_rejects_bad_want_syntax_with_exit_2(want: str) -> None:
    result = runner.invoke(app, ["mig", "plan", "--gpu", "NVIDIA H200", "--want", want])
    assert result.exit_code == 2
    assert "--want" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["plan", "profiles"])
@pytest.mark.parametrize("gpu", ["A100", "a100", "NVIDIA A100", "A100 PCIe"])
def test_a_gpu_name_with_several_tables_is_refused_listing_them(command: str, gpu: str) -> None:
    args = ["mig", command, "--gpu", gpu] + (["--want", "1g.10gb=1"] if command == "plan" else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"--gpu {gpu!r} matches more than one MIG table: "
        '"NVIDIA A100-SXM4-40GB" (a100-40gb), "NVIDIA A100-SXM4-80GB" (a100-80gb); name one'
    )


@pytest.mark.parametrize("gpu", ["H100", "A100 80GB", "NVIDIA A100-PCIE-40GB", "a100-40gb"])
def test_a_gpu_name_with_one_table_is_planned(gpu: str) -> None:
    result = runner.invoke(app, ["mig", "plan", "--gpu", gpu, "--want", "1g.10gb=1"])
    assert result.exit_code == 0, result.output


def _fake_with_idle_mig_gpu() -> FakeNvml:
    return FakeNvml(a100_mig_fleet())  # GPU 1: MIG on, 3g.40gb x2, no processes


def test_apply_without_flag_changes_nothing() -> None:
    fake = _fake_with_idle_mig_gpu()
    result = apply_mig_layout(1, {"4g.40gb": 1, "3g.40gb": 1}, nvml=fake)
    assert not result.applied
    assert fake.calls == []
    assert [gi.profile for gi in fake.gpus[1].instances] == ["3g.40gb", "3g.40gb"]
    assert result.steps[-1].startswith("would create GPU instance 3g.40gb at memory slices 4-7")


def test_apply_repartitions_an_idle_gpu_and_the_reporter_sees_it() -> None:
    fake = _fake_with_idle_mig_gpu()
    result = apply_mig_layout(1, {"4g.40gb": 1, "3g.40gb": 1}, apply=True, nvml=fake)
    assert result.applied
    assert fake.calls.count("nvmlDeviceCreateGpuInstanceWithPlacement") == 2
    assert fake.calls.count("nvmlGpuInstanceCreateComputeInstance") == 2
    assert fake.initialised == 0  # apply shut NVML down again
    report = NvmlProbe("node-1", nvml=fake).read()
    migs = report.gpus[1].mig_devices
    assert sorted((m.profile, m.placement_start) for m in migs) == [("3g.40gb", 4), ("4g.40gb", 0)]


def test_apply_refuses_a_gpu_with_processes() -> None:
    fake = _fake_with_idle_mig_gpu()
    fake.gpus[1].instances[0].processes = [4242]
    with pytest.raises(MigApplyError, match="not idle: processes run on MIG-"):
        apply_mig_layout(1, {"7g.80gb": 1}, apply=True, nvml=fake)
    assert fake.calls == []


def test_apply_refuses_a_gpu_without_mig_mode_and_impossible_layouts() -> None:
    with pytest.raises(MigApplyError, match="MIG mode is off on GPU 0"):
        apply_mig_layout(0, {"7g.80gb": 1}, apply=True, nvml=FakeNvml(h100_fleet(2)))
    with pytest.raises(MigApplyError, match="at most 2 fit"):
        apply_mig_layout(1, {"3g.40gb": 3}, apply=True, nvml=_fake_with_idle_mig_gpu())
    with pytest.raises(MigApplyError, match="no GPU 5"):
        apply_mig_layout(5, {"3g.40gb": 1}, nvml=_fake_with_idle_mig_gpu())


def test_apply_without_nvml_says_so() -> None:
    with pytest.raises(MigApplyError, match=r"libnvidia-ml\.so\.1 not found"):
        apply_mig_layout(0, {"3g.40gb": 1}, nvml=FakeNvml([], library_missing=True))


def test_apply_command_dry_run_and_apply() -> None:
    base = ["mig", "apply", "--gpu-index", "1", "--want", "2g.20gb=3", "--fake-nvml", "a100-mig"]
    dry = runner.invoke(app, base)
    assert dry.exit_code == 0, dry.output
    assert "dry run: nothing changed" in dry.stdout
    done = runner.invoke(app, [*base, "--apply"])
    assert done.exit_code == 0, done.output
    assert "is now 2g.20gb x3" in done.stdout
    refused = runner.invoke(app, [*base[:-2], "--fake-nvml", "h100", "--apply"])
    assert refused.exit_code == 1
    assert "MIG mode is off" in refused.stderr


def test_profiles_lists_the_table() -> None:
    result = runner.invoke(app, ["mig", "profiles", "--gpu", "NVIDIA H200"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["geometry"] == "h200-141gb" and body["confirmed"] is False
    assert {r["profile"]: r["max_count"] for r in body["profiles"]}["1g.35gb"] == 4
    assert runner.invoke(app, ["mig", "profiles", "--gpu", "Tesla T4"]).exit_code == 1


def test_apply_turns_nvml_refusals_into_a_sentence() -> None:
    fake = _fake_with_idle_mig_gpu()
    fake.gpus[1].add_instance("1g.10gb", 0).has_compute = False  # a bare GI in the way
    with pytest.raises(MigApplyError, match=r"creating 4g\.40gb at slice 0 .* failed"):
        apply_mig_layout(1, {"4g.40gb": 1}, apply=True, nvml=fake)
    lost = _fake_with_idle_mig_gpu()
    lost.gpus[1].lost = True
    with pytest.raises(MigApplyError, match="NVML refused the change on GPU 1: GPU is lost"):
        apply_mig_layout(1, {"4g.40gb": 1}, nvml=lost)
