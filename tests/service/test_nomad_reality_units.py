"""Reading what real Nomad says: reserved resources, drains, other allocations,
refused placements and short device allocations, from the documented API bodies."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from test_snapshot_units import _fixture

from scheduler.adapters.nomad_faults import RefusalMemory, refusal, short_allocation
from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.adapters.nomad_nodes import Usage, alloc_usage, less_usage, node_from_nomad
from scheduler.core.models import GPU, Node, Shard

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_node_capacity_is_less_its_reserved_resources() -> None:
    body = _fixture("node-read.json")  # 32000 MHz, 15803 MiB, nothing reserved
    assert node_from_nomad(body).memory_gb == round(15803 / 1024, 2)
    body["ReservedResources"]["Cpu"]["CpuShares"] = 5000
    body["ReservedResources"]["Memory"]["MemoryMB"] = 2048
    node = node_from_nomad(body)
    assert node.cpu_cores == 10.8  # (32000 - 5000) / 2500 MHz per core
    assert node.memory_gb == round((15803 - 2048) / 1024, 2)


def test_a_draining_node_is_ineligible_and_draining() -> None:
    body = _fixture("node-read.json")
    assert not node_from_nomad(body).draining
    body["DrainStrategy"] = {"Deadline": 3600_000_000_000, "IgnoreSystemJobs": False}
    body["SchedulingEligibility"] = "ineligible"
    node = node_from_nomad(body)
    assert node.draining and not node.eligible


def test_other_allocations_are_taken_off_the_node() -> None:
    node = Node(
        id="n1",
        name="n1",
        cpu_cores=64,
        memory_gb=512,
        gpus=[GPU(id=f"G{i}", model="H100", memory_gb=80) for i in range(2)],
    )
    alloc = _fixture("allocation-read.json")
    alloc["AllocatedResources"] = {
        "Tasks": {
            "t": {
                "Cpu": {"CpuShares": 8000},
                "Memory": {"MemoryMB": 4096},
                "Devices": [
                    {"Vendor": "nvidia", "Type": "gpu", "Name": "H100", "DeviceIDs": ["G1"]}
                ],
            }
        }
    }
    usage = Usage()
    alloc_usage(alloc, usage)
    less = less_usage(node, usage, mhz_per_core=2000.0)
    assert (less.cpu_cores, less.memory_gb, less.held) == (60.0, 508.0, ["G1"])
    assert less_usage(node, None, 2000.0) is node


def test_refusal_read_from_the_documented_evaluation() -> None:
    """evaluation-read.json: a completed evaluation with FailedTGAllocs for group "cache"."""
    documented = _fixture("evaluation-read.json")
    why, devices_only = refusal([documented]) or ("", False)
    assert why.startswith("cache: ")
    assert not devices_only  # nothing says it was the devices


def test_refusal_names_the_reasons_and_knows_a_device_shortage() -> None:
    failed = {
        "shard-0": {
            "ConstraintFiltered": {"${node.unique.id} = n1": 2},
            "DimensionExhausted": {"devices: no devices match request": 1},
        }
    }
    evals = [
        {"CreateIndex": 10, "Status": "complete", "FailedTGAllocs": failed, "BlockedEval": "b"},
        {"CreateIndex": 11, "Status": "blocked", "FailedTGAllocs": failed},
    ]
    why, devices_only = refusal(evals) or ("", False)
    assert '"devices: no devices match request" exhausted on 1 node(s)' in why
    assert devices_only
    memory = {"shard-0": {"DimensionExhausted": {"memory": 1}}}
    assert refusal([{"CreateIndex": 1, "Status": "complete", "FailedTGAllocs": memory}]) == (
        'shard-0: "memory" exhausted on 1 node(s)',
        False,
    )
    # Not yet decided, or placed: no refusal.
    assert refusal([{"CreateIndex": 3, "Status": "pending", "FailedTGAllocs": None}]) is None
    assert refusal([{"CreateIndex": 3, "Status": "complete", "FailedTGAllocs": None}]) is None
    assert refusal([]) is None


def _job(gpus: list[str]) -> OwnedJob:
    return OwnedJob(
        job_id="llm-qwen-2b-r-1",
        model="qwen-2b",
        profile="tp2",
        replica="r-1",
        created_at=NOW,
        preempted_for=None,
        stopped=False,
        wish=[Shard(node="n1", gpus=gpus)],
    )


def _alloc(ids: list[str]) -> dict:
    return {
        "ID": "abcdef12-0000",
        "NodeID": "n1",
        "AllocatedResources": {"Tasks": {"vllm": {"Devices": [{"DeviceIDs": ids}]}}},
    }


def test_short_allocation_is_told_from_a_full_one() -> None:
    assert short_allocation(_job(["G0", "G1"]), [_alloc(["G0", "G1"])]) is None
    why = short_allocation(_job(["G0", "G1"]), [_alloc(["G1"])]) or ""
    assert "got 1 of 2 devices (G1)" in why
    other = short_allocation(_job(["G0", "G1"]), [_alloc(["G1", "G7"])]) or ""
    assert "did not ask for: G7" in other


def test_refused_spots_are_kept_out_for_a_while() -> None:
    memory = RefusalMemory(hold_s=60)
    nodes = [
        Node(id="n1", name="n1", cpu_cores=8, memory_gb=64),
        Node(id="n2", name="n2", cpu_cores=8, memory_gb=64),
    ]
    memory.remember([Shard(node="n1", gpus=["G0"])], True, NOW)
    memory.remember([Shard(node="n2", gpus=["G9"])], False, NOW)
    held = memory.apply(copy.deepcopy(nodes), NOW + timedelta(seconds=30))
    assert held[0].held == ["G0"] and held[0].eligible
    assert not held[1].eligible  # not about devices: the whole node, for a while
    assert memory.apply(nodes, NOW + timedelta(seconds=61)) == nodes
