"""apply_reports: reporter records folded into Nomad's nodes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.adapters.gpu_reports import apply_reports, records_from_kv
from scheduler.core.models import GPU, MigSlice, Node
from scheduler.reporter.fake_gpus import a100_mig_fleet, failing_fleet, h100_fleet
from scheduler.reporter.fake_nvml import FakeNvml
from scheduler.reporter.probe import NvmlProbe
from scheduler.reporter.record import NodeGpuReport, normalize_pci_bus_id

KEY = "llm-scheduler/nodes/node-1/gpus"
GPU_FIELDS = [
    "index",
    "uuid",
    "name",
    "pci_bus_id",
    "mig_enabled",
    "mig_devices",
    "nvlink_peers",
    "ecc_uncorrected_volatile",
    "xid_critical_events",
    "xid_critical_total",
    "lost",
]


def read(fake: FakeNvml, node_id: str = "node-1") -> NodeGpuReport:
    probe = NvmlProbe(node_id, nvml=fake)
    probe.open()
    return probe.read()


def nomad_view(report: NodeGpuReport, node_id: str = "node-1") -> Node:
    """What the Nomad adapter builds from the device plugin: whole GPUs by UUID, a MIG GPU as a
    synthetic `pci-<bus>` parent with its MIG-... slices."""
    gpus = []
    for g in report.gpus:
        if g.mig_enabled:
            gpus.append(
                GPU(
                    id=f"pci-{normalize_pci_bus_id(g.pci_bus_id)}",
                    model=g.name,
                    memory_gb=80,
                    mig=[
                        MigSlice(id=m.uuid, profile=m.profile or "?", memory_gb=40)
                        for m in g.mig_devices
                    ],
                )
            )
        else:
            gpus.append(GPU(id=g.uuid, model=g.name, memory_gb=80))
    return Node(id=node_id, name="gpu-a1", cpu_cores=64, memory_gb=512, gpus=gpus)


def test_a_clean_report_changes_health_of_nothing_and_warns_nothing() -> None:
    report = read(FakeNvml(h100_fleet(4)))
    node = nomad_view(report)
    (updated,), warnings = apply_reports([node], {"node-1": report.model_dump_json().encode()})
    assert warnings == []
    assert all(g.healthy for g in updated.gpus)
    # NVSwitch peers fill nvlink_peers with Nomad's ids.
    assert set(updated.gpus[0].nvlink_peers) == {g.id for g in node.gpus[1:]}


def test_unhealthy_gpus_from_xid_ecc_and_lost() -> None:
    fake = FakeNvml(failing_fleet())
    probe = NvmlProbe("node-1", nvml=fake)
    probe.open()
    fake.inject_xid(0, 79)
    report = probe.read()
    node = nomad_view(report)
    (updated,), warnings = apply_reports([node], {"node-1": report.model_dump_json().encode()})
    health = [g.healthy for g in updated.gpus]
    assert health == [False, False, True, False]  # XID, ECC 3 > 0, no ECC counters, lost
    assert any("1 XID critical error(s) (XID 79)" in w for w in warnings)
    assert any("3 uncorrected ECC errors (threshold 0)" in w for w in warnings)
    # A threshold above the count keeps the ECC GPU healthy.
    (lenient,), _ = apply_reports(
        [node], {"node-1": report.model_dump_json().encode()}, ecc_threshold=5
    )
    assert [g.healthy for g in lenient.gpus] == [False, True, True, False]


def test_mig_parent_matched_by_slices_and_made_unhealthy_with_its_slices() -> None:
    fake = FakeNvml(a100_mig_fleet())
    probe = NvmlProbe("node-1", nvml=fake)
    probe.open()
    fake.inject_xid(1, 48)  # double-bit ECC error
    report = probe.read()
    node = nomad_view(report)
    (updated,), warnings = apply_reports([node], {"node-1": report.model_dump_json()})
    whole, mig = updated.gpus
    assert whole.healthy and not mig.healthy
    assert mig.mig is not None and [s.healthy for s in mig.mig] == [False, False]
    assert whole.nvlink_peers == [mig.id] and mig.nvlink_peers == [whole.id]
    assert len(warnings) == 1 and "is unhealthy" in warnings[0]


def test_mig_parent_matched_by_pci_bus_id_when_slices_differ() -> None:
    report = read(FakeNvml(a100_mig_fleet()))
    node = nomad_view(report)
    parent = node.gpus[1]
    assert parent.mig is not None
    renamed = parent.model_copy(
        update={"mig": [s.model_copy(update={"id": s.id + "-x"}) for s in parent.mig]}
    )
    node = node.model_copy(update={"gpus": [node.gpus[0], renamed]})
    (updated,), warnings = apply_reports([node], {"node-1": report.model_dump_json()})
    assert [s.id for s in updated.gpus[1].mig or []] == [s.id for s in renamed.mig or []]
    assert sum("is not in the GPU report" in w for w in warnings) == 2
    assert sum("is not in Nomad's fingerprint; ignored" in w for w in warnings) == 2


def test_disagreements_are_warnings_and_nomad_wins() -> None:
    report = read(FakeNvml(h100_fleet(2)))
    node = nomad_view(report)
    extra = GPU(id="GPU-only-in-nomad", model="NVIDIA H100 80GB HBM3", memory_gb=80)
    renamed = node.gpus[0].model_copy(update={"model": "NVIDIA H200"})
    node = node.model_copy(update={"gpus": [renamed, extra]})  # GPU 1 of the report is missing
    (updated,), warnings = apply_reports([node], {"node-1": report.model_dump_json()})
    assert [g.id for g in updated.gpus] == [renamed.id, extra.id]
    assert updated.gpus[0].model == "NVIDIA H200"
    text = "\n".join(warnings)
    assert "Nomad says 'NVIDIA H200', NVML says 'NVIDIA H100 80GB HBM3'; using Nomad's" in text
    assert f"GPU {report.gpus[1].uuid} (NVIDIA H100 80GB HBM3) reported by NVML" in text
    assert "GPU GPU-only-in-nomad on node gpu-a1 (node-1) is in Nomad's fingerprint but not" in text
    # The peer that Nomad does not know is not invented.
    assert updated.gpus[0].nvlink_peers == []


def test_mig_mode_disagreement_is_a_warning() -> None:
    report = read(FakeNvml(a100_mig_fleet()))
    node = nomad_view(read(FakeNvml(a100_mig_fleet())))
    whole = report.gpus[1].model_copy(update={"mig_enabled": False, "mig_devices": []})
    report = report.model_copy(update={"gpus": [report.gpus[0], whole]})
    _, warnings = apply_reports([node], {"node-1": report.model_dump_json()})
    assert any("Nomad offers it as MIG slices, NVML says MIG mode is off" in w for w in warnings)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", f"GPU report {KEY} is not JSON"),
        (b"", f"GPU report {KEY} is empty"),
        (json.dumps({"node_id": "node-1"}).encode(), "field reported_at: Field required"),
        (
            json.dumps(
                {"node_id": "node-1", "reported_at": "2026-12-02T10:00:00Z", "gpus": [{"index": 0}]}
            ).encode(),
            f"GPU report {KEY} is malformed: field gpus.0.uuid: Field required",
        ),
        (
            json.dumps(
                {
                    "node_id": "node-1",
                    "reported_at": "2026-12-02T10:00:00Z",
                    "gpus": [
                        {"index": 0, "uuid": "GPU-1", "name": "x", "ecc_uncorrected_volatile": -1}
                    ],
                }
            ).encode(),
            "field gpus.0.ecc_uncorrected_volatile",
        ),
        (b"\xff\xfe", f"GPU report {KEY} is not JSON"),
    ],
)
def test_malformed_record_is_a_warning_naming_key_and_field(raw: bytes, expected: str) -> None:
    node = nomad_view(read(FakeNvml(h100_fleet(1))))
    (updated,), warnings = apply_reports([node], {"node-1": raw})
    assert updated == node
    assert len(warnings) == 1 and expected in warnings[0], warnings


def test_records_for_unknown_nodes_and_nodes_without_records() -> None:
    report = read(FakeNvml(h100_fleet(1)))
    node = nomad_view(report)
    other = Node(id="node-2", name="cpu-1", cpu_cores=8, memory_gb=32)
    out, warnings = apply_reports(
        [node, other], {"node-1": report.model_dump_json(), "ghost": report.model_dump_json()}
    )
    assert out[1] == other
    assert any(
        "llm-scheduler/nodes/ghost/gpus is for a node Nomad does not list" in w for w in warnings
    )
    assert len(warnings) == 1 and not any("node-2" in w for w in warnings)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(
    st.fixed_dictionaries(
        {"node_id": st.just("node-1"), "reported_at": st.just("2026-12-02T10:00:00Z")},
        optional={
            "gpus": st.lists(st.dictionaries(st.sampled_from(GPU_FIELDS), _json), max_size=2)
        },
    )
)
def test_any_json_shape_never_raises(value: dict) -> None:
    node = nomad_view(read(FakeNvml(h100_fleet(1))))
    out, warnings = apply_reports([node], {"node-1": json.dumps(value).encode()})
    assert len(out) == 1 and all(isinstance(w, str) for w in warnings)


def test_records_from_kv_picks_node_gpu_keys() -> None:
    entries = [
        {"Key": "llm-scheduler/nodes/n1/gpus", "Value": b"{}"},
        {"Key": "llm-scheduler/nodes/n2/other", "Value": b"{}"},
        {"Key": "llm-scheduler/nodes/n3/gpus", "Value": None},
    ]
    assert records_from_kv(entries) == {"n1": b"{}", "n3": b""}
    assert records_from_kv(None) == {}


def test_application_xids_do_not_mark_a_gpu_unhealthy_unless_asked() -> None:
    fake = FakeNvml(h100_fleet(2))
    probe = NvmlProbe("node-1", nvml=fake)
    probe.open()
    fake.inject_xid(0, 31)  # a CUDA program's page fault
    fake.inject_xid(1, 31)
    fake.inject_xid(1, 79)  # fell off the bus
    report = probe.read()
    assert report.gpus[1].xid_critical_counts == {31: 1, 79: 1}
    node = nomad_view(report)
    raw = {"node-1": report.model_dump_json()}
    (updated,), warnings = apply_reports([node], raw)
    assert [g.healthy for g in updated.gpus] == [True, False]
    assert any("1 XID critical error(s) (XID 79)" in w for w in warnings)
    (strict,), _ = apply_reports([node], raw, ignore_xids=frozenset())
    assert [g.healthy for g in strict.gpus] == [False, False]


def test_total_without_per_xid_counts_still_counts() -> None:
    report = read(FakeNvml(h100_fleet(1)))
    gpu = report.gpus[0].model_copy(update={"xid_critical_total": 2})
    report = report.model_copy(update={"gpus": [gpu]})
    (updated,), _ = apply_reports([nomad_view(report)], {"node-1": report.model_dump_json()})
    assert not updated.gpus[0].healthy


def test_mig_gpu_without_instances_gets_an_actionable_warning() -> None:
    fake = FakeNvml(a100_mig_fleet())
    fake.gpus[1].instances.clear()
    report = read(fake)
    node = nomad_view(report)
    node = node.model_copy(update={"gpus": node.gpus[:1]})  # Nomad sees nothing of GPU 1
    _, warnings = apply_reports([node], {"node-1": report.model_dump_json()})
    assert warnings == [
        f"GPU {report.gpus[1].uuid} (NVIDIA A100-SXM4-80GB) on node gpu-a1 (node-1) is in MIG "
        "mode with no MIG instances, so Nomad offers nothing of it: create instances "
        "(llm-scheduler mig apply) or turn MIG mode off"
    ]


def test_fleet_for_node_mirrors_a_nomad_node() -> None:
    from scheduler.reporter.fake_gpus import fleet_for_node

    node = Node(
        id="node-9",
        name="gpu-c1",
        cpu_cores=64,
        memory_gb=512,
        gpus=[
            GPU(
                id="GPU-aaa", model="NVIDIA H100 80GB HBM3", memory_gb=80, nvlink_peers=["GPU-bbb"]
            ),
            GPU(
                id="GPU-bbb", model="NVIDIA H100 80GB HBM3", memory_gb=80, nvlink_peers=["GPU-aaa"]
            ),
            GPU(
                id="pci-00000000:0A:00.0",
                model="NVIDIA A100-SXM4-80GB",
                memory_gb=80,
                mig=[
                    MigSlice(id="MIG-1", profile="4g.40gb", memory_gb=40),
                    MigSlice(id="MIG-2", profile="3g.40gb", memory_gb=40),
                ],
            ),
        ],
    )
    fake = FakeNvml(fleet_for_node(node))
    probe = NvmlProbe("node-9", nvml=fake)
    probe.open()
    fake.inject_xid(2, 79)
    report = probe.read()
    assert [m.placement_start for m in report.gpus[2].mig_devices] == [0, 4]
    (updated,), warnings = apply_reports([node], {"node-9": report.model_dump_json()})
    assert [w for w in warnings if "unhealthy" not in w] == []
    assert [g.healthy for g in updated.gpus] == [True, True, False]
    assert updated.gpus[0].nvlink_peers == ["GPU-bbb"]
