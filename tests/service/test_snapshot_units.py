"""Unit tests of the Nomad/KV translation on the documented fixtures (no servers)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

from scheduler.adapters.catalog import GENERAL, read_catalog
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_allocs import replica_from
from scheduler.adapters.nomad_jobs import (
    build_job,
    job_id,
    owned_job,
)
from scheduler.adapters.nomad_nodes import gpus_from_devices, node_from_nomad
from scheduler.core.models import GPU, MigSlice, Model, Node, Shard, StartAction
from scheduler.service.watch import Backoff, next_index

# shared/ lies beside the checkout (CI lays a copy there); /work/shared is the workplace mount.
FIXTURES = next(
    (
        p
        for p in (
            Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "nomad",
            Path("/work/shared/fixtures/nomad"),
        )
        if p.exists()
    ),
    Path("/work/shared/fixtures/nomad"),
)
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
LAYOUT = KVLayout()


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_node_read_fixture_without_gpus_uses_cpu_shares_fallback() -> None:
    node = node_from_nomad(_fixture("node-read.json"))
    assert node.gpus == []  # hashicorp/skeleton devices are not NVIDIA GPUs
    assert node.cpu_cores == 12.8  # 32000 MHz shares, no TotalCpuCores
    assert node.memory_gb == round(15803 / 1024, 2)
    assert node.eligible and node.pool == "default"


def test_mig_excerpt_groups_slices_under_a_derived_parent() -> None:
    devices = _fixture("node-devices-nvidia-mig-excerpt.json")["Devices"]
    gpus = gpus_from_devices(devices)
    assert [g.id for g in gpus] == ["pci-00000000:06:00.0"]
    parent = gpus[0]
    assert parent.model == "NVIDIA A100-SXM4-40GB"
    assert parent.mig is not None
    assert [(s.id, s.profile) for s in parent.mig] == [
        ("MIG-ef272c5a-6ffd-5813-904c-ae1325994ab0", "3g.20gb")
    ]


def test_two_mig_profiles_on_one_bus_make_one_gpu_and_memory_is_mib_to_gb() -> None:
    inst = {"Healthy": True, "Locality": {"PciBusID": "0000:07:00.0\x00\x00"}}
    devices = [
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            "Attributes": {"memory": {"Int": 40960, "Unit": "MiB"}},
            "Instances": [{**inst, "ID": "MIG-a"}],
        },
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
            "Attributes": {"memory": {"Int": 10240, "Unit": "MiB", "Float": None}},
            "Instances": [{**inst, "ID": "MIG-b", "Healthy": False}],
        },
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "NVIDIA H100 80GB HBM3",
            "Attributes": {"memory": {"Int": 81920, "Unit": "MiB"}},
            "Instances": [{**inst, "ID": "GPU-1", "Locality": {"PciBusID": "0000:08:00.0"}}],
        },
    ]
    gpus = {g.id: g for g in gpus_from_devices(devices)}
    assert set(gpus) == {"GPU-1", "pci-0000:07:00.0"}
    assert gpus["GPU-1"].memory_gb == 80 and gpus["GPU-1"].mig is None
    mig = gpus["pci-0000:07:00.0"]
    assert mig.mig is not None
    assert {s.profile: s.memory_gb for s in mig.mig} == {"3g.40gb": 40, "1g.10gb": 10}
    assert not mig.healthy  # one unhealthy slice marks the parent


def _model() -> Model:
    return Model.model_validate(
        {
            "name": "llama",
            "owner": "org/a",
            "profiles": [{"name": "tp2", "gpus": 2, "shards": 2, "cpu_cores": 4}],
            "serve": {"source": "meta-llama/Llama-3.1-8B"},
        }
    )


def _nodes() -> dict[str, Node]:
    def gpu(i: str) -> GPU:
        return GPU(id=i, model="NVIDIA H100 80GB HBM3", memory_gb=80)

    mig = GPU(
        id="pci-x",
        model="NVIDIA A100-SXM4-80GB",
        memory_gb=80,
        mig=[MigSlice(id="MIG-1", profile="3g.40gb", memory_gb=40)],
    )
    return {
        "n1": Node(
            id="n1",
            name="a",
            address="10.0.0.1",
            cpu_cores=8,
            memory_gb=64,
            gpus=[gpu("G1"), gpu("G2")],
        ),
        "n2": Node(id="n2", name="b", cpu_cores=8, memory_gb=64, gpus=[gpu("G3"), gpu("G4"), mig]),
    }


TEMPLATE = {"ID": "llm", "TaskGroups": [{"Name": "shard", "Tasks": [{"Name": "server"}]}]}


def test_job_shape_one_group_per_shard_pinned_with_device_ids() -> None:
    action = StartAction(
        model="llama",
        profile="tp2",
        replica="r-1",
        shards=[Shard(node="n1", gpus=["G1", "G2"]), Shard(node="n2", gpus=["G3", "G4"])],
        reason="test",
    )
    job = build_job(copy.deepcopy(TEMPLATE), _model(), action, _nodes(), NOW)
    assert job["ID"] == job_id("llama", "r-1") == "llm-llama-r-1"
    assert job["Meta"]["llm_scheduler_model"] == "llama"
    assert job["Meta"]["llm_scheduler_replica"] == "r-1"
    assert len(job["TaskGroups"]) == 2
    g0 = job["TaskGroups"][0]
    assert {"LTarget": "${node.unique.id}", "RTarget": "n1", "Operand": "="} in g0["Constraints"]
    dev = g0["Tasks"][0]["Resources"]["Devices"][0]
    assert dev["Name"] == "nvidia/gpu/NVIDIA H100 80GB HBM3" and dev["Count"] == 2
    assert dev["Constraints"][0] == {
        "LTarget": "${device.ids}",
        "RTarget": "G1,G2",
        "Operand": "set_contains_any",
    }
    back = owned_job(job)
    assert back is not None
    assert back.replica == "r-1" and back.created_at == NOW
    assert back.wish == action.shards


def test_mig_start_names_the_mig_device_group() -> None:
    model = Model.model_validate(
        {
            "name": "m",
            "owner": "o",
            "profiles": [{"name": "mig", "mig_profile": "3g.40gb"}],
            "serve": {"source": "org/m"},
        }
    )
    action = StartAction(
        model="m",
        profile="mig",
        replica="r-2",
        shards=[Shard(node="n2", gpus=["MIG-1"])],
        reason="",
    )
    job = build_job(copy.deepcopy(TEMPLATE), model, action, _nodes(), NOW)
    dev = job["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"][0]
    assert dev["Name"] == "nvidia/gpu/NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert dev["Count"] == 1


def test_foreign_job_is_not_ours() -> None:
    assert owned_job(_fixture("job-read.json")) is None


def test_replica_state_from_allocations() -> None:
    action = StartAction(
        model="llama",
        profile="tp2",
        replica="r-1",
        shards=[Shard(node="n1", gpus=["G1"])],
        reason="",
    )
    job = owned_job(build_job(copy.deepcopy(TEMPLATE), _model(), action, _nodes(), NOW))
    assert job is not None
    alloc = copy.deepcopy(_fixture("allocation-read.json"))
    alloc.update(
        JobID=job.job_id,
        NodeID="n1",
        AllocatedResources={"Tasks": {"server": {"Devices": [{"DeviceIDs": ["G2"]}]}}},
    )
    pending = {**alloc, "ClientStatus": "pending"}
    rep = replica_from(job, [pending], set(), None)
    assert rep is not None and rep.state == "starting"
    assert rep.shards == [Shard(node="n1", gpus=["G2"])]  # the allocation is the truth
    assert replica_from(job, [alloc], set(), None).state == "starting"  # type: ignore[union-attr]
    ready = replica_from(job, [alloc], {alloc["ID"]}, None)
    assert ready is not None and ready.state == "running" and ready.ready_at is not None
    stopped = type(job)(**{**job.__dict__, "stopped": True})
    assert replica_from(stopped, [{**alloc, "DesiredStatus": "stop"}], set(), None).state == (  # type: ignore[union-attr]
        "stopping"
    )
    assert replica_from(stopped, [{**alloc, "ClientStatus": "complete"}], set(), None) is None
    assert replica_from(job, [], set(), None).shards == job.wish  # type: ignore[union-attr]


def _kv(key: str, value: object) -> dict:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return {"Key": LAYOUT.prefix + key, "Value": raw, "ModifyIndex": 1}


def test_catalog_reports_each_bad_value_and_keeps_the_rest() -> None:
    good = {"owner": "org/a", "profiles": [{"name": "p"}], "serve": {"source": "org/good"}}
    entries = [
        _kv("models/good", good),
        _kv("models/llama", {**good, "scaling": {"min": -1}}),
        _kv("models/broken", b"{not json"),
        _kv("models/huge", b"x" * 70000),
        _kv("models/cls", {**good, "class": "vip"}),
        _kv("quotas/org/a", {"owner": "org/b", "guarantee": {"gpus": 1}}),
        _kv("quotas/org", {"guarantee": {"gpus": 1}}),
        _kv("demand/good", {"inflight": "many"}),
        _kv("settings", {"max_victims": "x"}),
    ]
    cat = read_catalog(entries, LAYOUT)
    assert set(cat.models) == {"good"}
    assert cat.errors["llama"] == [
        "llm-scheduler/models/llama: scaling.min: Input should be greater than or equal to 0"
    ]
    assert "not valid JSON" in cat.errors["broken"][0]
    assert "over the limit" in cat.errors["huge"][0]
    assert cat.errors["cls"][0].startswith("llm-scheduler/models/cls: class:")
    assert any("quotas/org/a: owner:" in e for e in cat.errors[GENERAL])
    assert set(cat.quotas) == {"org"}
    assert cat.bad_quotas == {"org/a"}
    assert cat.errors["good"][0].startswith("llm-scheduler/demand/good: inflight:")
    assert "good" in cat.bad_models  # its demand is unusable: it is frozen, not scaled down
    assert cat.bad_settings and any("settings: max_victims" in e for e in cat.errors[GENERAL])


def test_index_rules_and_backoff() -> None:
    assert next_index(0, 5) == 5
    assert next_index(10, 3) == 0  # went backwards: reset, read non-blocking
    assert next_index(10, 0) == 0
    b = Backoff(0.1, 1.0)
    delays = [b.next() for _ in range(10)]
    assert all(0 <= d <= 1.0 for d in delays)
    b.reset()
    assert b.next() <= 0.2
