"""NvmlProbe against the fake NVML, and the record model."""

from __future__ import annotations

from datetime import UTC, datetime

import pynvml
import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.reporter.fake_gpus import (
    GIB,
    a100_fleet,
    a100_mig_fleet,
    failing_fleet,
    h100_fleet,
    h200_fleet,
)
from scheduler.reporter.fake_nvml import FakeNvml
from scheduler.reporter.probe import NvmlProbe, NvmlUnavailable, mig_profile_from_name
from scheduler.reporter.record import NodeGpuReport, normalize_pci_bus_id

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def probe_for(fake: FakeNvml) -> NvmlProbe:
    probe = NvmlProbe("node-1", nvml=fake, hostname="gpu-a1", clock=lambda: NOW)
    probe.open()
    return probe


def test_fake_raises_pynvmls_own_error_classes() -> None:
    fake = FakeNvml(h100_fleet(1))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        FakeNvml([], library_missing=True).nvmlInit()
    mig = FakeNvml(a100_mig_fleet())
    mig.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        mig.nvmlDeviceGetUtilizationRates(mig.gpus[1])
    with pytest.raises(pynvml.NVMLError_NotFound):
        mig.nvmlDeviceGetMigDeviceHandleByIndex(mig.gpus[1], 5)
    assert isinstance(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT), pynvml.NVMLError_Timeout)


def test_h100_node_whole_gpus_with_nvswitch_peers() -> None:
    report = probe_for(FakeNvml(h100_fleet(8))).read()
    assert report.node_id == "node-1" and report.hostname == "gpu-a1"
    assert report.driver_version == "550.54.15"
    assert len(report.gpus) == 8
    first = report.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.memory_total_bytes == 80 * GIB and first.memory_used_bytes == GIB // 2
    assert first.utilization_gpu_pct == 0 and report.gpus[3].utilization_gpu_pct == 30
    assert not first.mig_enabled and first.mig_devices == []
    # NVSwitch: every GPU reaches every other one.
    assert set(first.nvlink_peers) == {g.uuid for g in report.gpus[1:]}
    assert first.ecc_uncorrected_volatile == 0
    assert all(g.errors == [] for g in report.gpus)


def test_a100_pcie_pairs_are_peers_only_of_each_other() -> None:
    report = probe_for(FakeNvml(a100_fleet(4))).read()
    uuids = [g.uuid for g in report.gpus]
    assert [g.nvlink_peers for g in report.gpus] == [[uuids[1]], [uuids[0]], [uuids[3]], [uuids[2]]]


def test_h200_fleet_reads() -> None:
    report = probe_for(FakeNvml(h200_fleet(2))).read()
    assert [g.name for g in report.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert report.gpus[0].memory_total_bytes == 141 * GIB


def test_mig_gpu_reports_slices_and_no_utilisation() -> None:
    report = probe_for(FakeNvml(a100_mig_fleet())).read()
    whole, mig = report.gpus
    assert not whole.mig_enabled and whole.utilization_gpu_pct is not None
    assert (
        mig.mig_enabled and mig.utilization_gpu_pct is None and mig.utilization_memory_pct is None
    )
    assert [(d.profile, d.placement_start, d.placement_size) for d in mig.mig_devices] == [
        ("3g.40gb", 0, 4),
        ("3g.40gb", 4, 4),
    ]
    assert all(d.uuid.startswith("MIG-") for d in mig.mig_devices)
    assert mig.mig_devices[0].memory_total_bytes == 40 * GIB


def test_failing_gpus_xid_ecc_lost() -> None:
    fake = FakeNvml(failing_fleet())
    probe = probe_for(fake)
    fake.inject_xid(0, 79)
    fake.inject_xid(0, 48)
    report = probe.read()
    g0, g1, g2, g3 = report.gpus
    assert [e.xid for e in g0.xid_critical_events] == [79, 48] and g0.xid_critical_total == 2
    assert g1.ecc_uncorrected_volatile == 3
    assert g2.ecc_uncorrected_volatile is None and g2.errors == []  # not supported is not an error
    assert g3.lost and any("GPU is lost" in e for e in g3.errors)
    # Events are drained, not re-read, but the GPU keeps its history.
    again = probe.read()
    assert again.gpus[0].xid_critical_total == 2
    fake.inject_xid(0, 79)
    assert probe.read().gpus[0].xid_critical_total == 3


def test_events_unsupported_is_noted_not_fatal() -> None:
    report = probe_for(FakeNvml(h100_fleet(1), events_supported=False)).read()
    assert report.gpus and any("xid events on GPU 0" in e for e in report.errors)


def test_missing_library_is_one_clear_sentence() -> None:
    probe = NvmlProbe("n", nvml=FakeNvml([], library_missing=True))
    with pytest.raises(NvmlUnavailable) as caught:
        probe.open()
    assert str(caught.value) == (
        "NVML is not available on this node (libnvidia-ml.so.1 not found): install the NVIDIA "
        "driver or run the reporter only on GPU nodes"
    )


def test_record_round_trips_and_ignores_unknown_fields() -> None:
    report = probe_for(FakeNvml(a100_mig_fleet())).read()
    raw = report.model_dump_json()
    assert NodeGpuReport.model_validate_json(raw) == report
    newer = report.model_dump(mode="json") | {"future_field": 1}
    assert NodeGpuReport.model_validate(newer) == report


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:1A:00.0\x00\x00", "0000:1a:00.0"),
        ("pci-0000:07:00.0", "0000:07:00.0"),
        (b"0000:07:00.0", "0000:07:00.0"),
        ("GPU-abc", None),
    ],
)
def test_bus_ids_normalise(raw: str | bytes, norm: str | None) -> None:
    assert normalize_pci_bus_id(raw) == norm


def test_mig_profile_from_name() -> None:
    assert mig_profile_from_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me") == "1g.5gb+me"
    assert mig_profile_from_name("NVIDIA H100 80GB HBM3") is None


runner = CliRunner()


def test_reporter_once_prints_a_record() -> None:
    result = runner.invoke(app, ["reporter", "--once", "--fake-nvml", "a100-mig"])
    assert result.exit_code == 0, result.output
    assert len(NodeGpuReport.model_validate_json(result.stdout).gpus) == 2


def test_reporter_without_nvml_exits_1_with_one_sentence() -> None:
    result = runner.invoke(app, ["reporter", "--node-id", "n1", "--fake-nvml", "missing"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("NVML is not available on this node (libnvidia-ml.so.1")
    assert len(result.stderr.strip().splitlines()) == 1


def test_reporter_without_node_id_or_with_bad_timing_exits_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLM_SCHEDULER_NODE_ID", raising=False)
    monkeypatch.delenv("NOMAD_NODE_ID", raising=False)
    assert runner.invoke(app, ["reporter", "--fake-nvml", "h100"]).exit_code == 2
    bad_ttl = runner.invoke(app, ["reporter", "--node-id", "n", "--ttl", "5"])
    assert bad_ttl.exit_code == 2 and "--ttl" in bad_ttl.stderr
    bad_interval = runner.invoke(app, ["reporter", "--node-id", "n", "--interval", "20"])
    assert bad_interval.exit_code == 2 and "--interval" in bad_interval.stderr
