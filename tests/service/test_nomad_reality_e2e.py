"""The service against a Nomad stand-in that behaves as real Nomad does: other
namespaces' allocations, refused placements, short device allocations, gradual drains.
End to end over HTTP; the stand-in's own helpers only stage what another user would do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_helpers import LAYOUT, model_value, our_jobs, put, start_leader, status, wait_for

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.nomad.acl import WRITE, NomadACL, NomadToken
from scheduler.service.loop import Service

SCHEDULER_TOKEN = "scheduler-secret"


def foreign_job(job_id: str, namespace: str, node: str, gpu_ids: list[str]) -> dict[str, Any]:
    """Someone else's job, pinned to `gpu_ids` on `node`."""
    wish = {"LTarget": "${device.ids}", "RTarget": ",".join(gpu_ids), "Operand": "set_contains"}
    return {
        "ID": job_id,
        "Namespace": namespace,
        "TaskGroups": [
            {
                "Name": "train",
                "Constraints": [{"LTarget": "${node.unique.id}", "RTarget": node, "Operand": "="}],
                "Tasks": [
                    {
                        "Name": "train",
                        "Driver": "docker",
                        "Resources": {
                            "CPU": 16000,
                            "MemoryMB": 64 * 1024,
                            "Devices": [
                                {"Name": "nvidia/gpu", "Count": len(gpu_ids), "Constraints": [wish]}
                            ],
                        },
                    }
                ],
            }
        ],
    }


def hide_namespace_from_scheduler(cluster: DevCluster) -> None:
    """An ACL token that reads and writes only `default`: other namespaces' allocations are
    filtered out of its `?namespace=*` listing, as Nomad does (nomad/alloc_endpoint.go List)."""
    token = NomadToken(
        secret_id=SCHEDULER_TOKEN,
        namespaces={"default": WRITE},
        node="read",
    )
    cluster.nomad.acl = NomadACL([token])


@pytest.fixture
def start_service(cluster: DevCluster) -> Iterator[Any]:
    started: list[Service] = []

    def start(**extra: Any) -> Service:
        svc = start_leader(cluster, **extra)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


def _running_allocs(cluster: DevCluster, model: str) -> list[dict[str, Any]]:
    return [
        a
        for job in our_jobs(cluster, model)
        for a in cluster.nomad.allocations(job["ID"])
        if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"
    ]


def _devices(alloc: dict[str, Any]) -> set[str]:
    return {
        i
        for t in alloc["AllocatedResources"]["Tasks"].values()
        for d in t["Devices"] or []
        for i in d["DeviceIDs"]
    }


def test_other_namespaces_allocations_are_left_alone(
    cluster: DevCluster, start_service: Any
) -> None:
    """Capacity is node resources less every non-terminal allocation, whatever its namespace:
    the scheduler never wishes the GPUs another namespace holds."""
    held = [f"GPU-h1-{i}" for i in range(3)]
    cluster.nomad.cluster.register(foreign_job("train", "research", "node-h1", held))
    start_service()
    put(cluster, LAYOUT.model_key("qwen-2b"), model_value([{"name": "tp2", "gpus": 2}]))
    put(cluster, LAYOUT.demand_key("qwen-2b"), {"inflight": 20, "queued": 0})
    allocs = wait_for(
        lambda: (
            len(_running_allocs(cluster, "qwen-2b")) == 2 and _running_allocs(cluster, "qwen-2b")
        ),
        what="two running replicas",
    )
    assert all(not _devices(a) & set(held) for a in allocs)
    # h1 has one free GPU left: both 2-GPU replicas had to go to h2.
    assert {a["NodeID"] for a in allocs} == {"node-h2"}
    assert (status(cluster, "qwen-2b") or {}).get("last_error") is None  # nothing refused


def test_refused_placement_fails_the_replica_and_tries_elsewhere(
    cluster: DevCluster, start_service: Any
) -> None:
    """A placement Nomad refuses (FailedTGAllocs, a blocked evaluation, no allocation) fails the
    replica: its job is deregistered, the reason is in the status, and the refused devices are
    kept out of the next placements (no tight loop of refused registrations)."""
    cluster.nomad.cluster.register(
        foreign_job("train", "research", "node-h1", [f"GPU-h1-{i}" for i in range(4)])
    )
    hide_namespace_from_scheduler(cluster)
    start_service(nomad_token=SCHEDULER_TOKEN)
    put(cluster, LAYOUT.model_key("qwen-4b"), model_value([{"name": "tp4", "gpus": 4}]))
    put(cluster, LAYOUT.demand_key("qwen-4b"), {"inflight": 20, "queued": 0})

    def refused_status() -> str:
        return str((status(cluster, "qwen-4b") or {}).get("last_error") or "")

    error = wait_for(lambda: "placement refused by Nomad" in refused_status() and refused_status())
    assert '"devices: no devices match request" exhausted on 1 node(s)' in error
    # The other replica runs on h2; h1 is not asked again while the refusal is remembered.
    [alloc] = wait_for(lambda: _running_allocs(cluster, "qwen-4b"), what="a replica on h2")
    assert alloc["NodeID"] == "node-h2"
    time.sleep(2.0)  # several passes
    refused_jobs = {
        e["JobID"]
        for e in cluster.nomad.cluster.evaluations(namespace="default")
        if e["JobID"].startswith("llm-qwen-4b") and e.get("FailedTGAllocs")
    }
    assert len(refused_jobs) == 1
    blocked = [j for j in our_jobs(cluster, "qwen-4b") if j["ID"] in refused_jobs]
    assert blocked == []  # deregistered
    assert "placement refused" in refused_status()
    st = status(cluster, "qwen-4b") or {}
    assert st["desired"] == 2 and st["pending"]


def test_short_device_allocation_is_stopped_and_reported(
    cluster: DevCluster, start_service: Any
) -> None:
    """Nomad 1.9.0 to 1.11.0 could give an allocation fewer instances than its count when a
    wished one was busy: the scheduler compares DeviceIDs with its wish, stops the replica,
    says why, and does not wish the busy device again for a while."""
    cluster.nomad.cluster.short_devices = True
    cluster.nomad.set_node_eligibility("node-h2", False)
    cluster.nomad.cluster.register(foreign_job("train", "research", "node-h1", ["GPU-h1-0"]))
    hide_namespace_from_scheduler(cluster)
    start_service(nomad_token=SCHEDULER_TOKEN)
    put(cluster, LAYOUT.model_key("qwen-2b"), model_value([{"name": "tp2", "gpus": 2}]))
    put(cluster, LAYOUT.demand_key("qwen-2b"), {"inflight": 5, "queued": 0})
    error = wait_for(
        lambda: (
            "of 2 devices" in str((status(cluster, "qwen-2b") or {}).get("last_error"))
            and status(cluster, "qwen-2b")["last_error"]
        ),  # type: ignore[index]
        what="the short allocation reported",
    )
    assert "got 1 of 2 devices" in error
    [alloc] = wait_for(
        lambda: [a for a in _running_allocs(cluster, "qwen-2b") if len(_devices(a)) == 2],
        what="a full replacement",
    )
    assert "GPU-h1-0" not in _devices(alloc)


def test_draining_node_replica_moves_make_before_break(
    cluster: DevCluster, start_service: Any
) -> None:
    """A drain (Drain true, DrainStrategy) makes the node ineligible; the scheduler starts the
    replacement elsewhere, and stops the old replica only once the new one runs. Its jobs hold
    their allocation through the drain (`migrate { max_parallel = 0 }`), so the drainer does
    not kill it first, and the drain ends long before its deadline."""
    cluster.nomad.set_node_eligibility("node-h2", False)
    start_service()
    put(cluster, LAYOUT.model_key("qwen-4b"), model_value([{"name": "tp4", "gpus": 4}]))
    put(cluster, LAYOUT.demand_key("qwen-4b"), {"inflight": 5, "queued": 0})
    [old] = wait_for(lambda: _running_allocs(cluster, "qwen-4b"), what="a replica on h1")
    assert old["NodeID"] == "node-h1"
    [job] = our_jobs(cluster, "qwen-4b")
    assert job["TaskGroups"][0]["Migrate"]["MaxParallel"] == 0
    wait_for(lambda: (status(cluster, "qwen-4b") or {}).get("live") == 1, what="ready")
    cluster.nomad.set_node_eligibility("node-h2", True)
    cluster.nomad.drain_node("node-h1", deadline_s=60)
    [new] = wait_for(
        lambda: [a for a in _running_allocs(cluster, "qwen-4b") if a["NodeID"] == "node-h2"],
        what="the replacement on h2",
    )
    wait_for(lambda: [a["NodeID"] for a in _running_allocs(cluster, "qwen-4b")] == ["node-h2"])
    gone_full = cluster.nomad.cluster.alloc(old["ID"])
    assert gone_full is not None
    started = min(t["StartedAt"] for t in new["TaskStates"].values())
    finished = max(t["FinishedAt"] for t in gone_full["TaskStates"].values())
    assert started < finished  # the replacement ran before the old one was stopped
    gone = cluster.nomad.cluster.alloc(old["ID"])
    assert gone is not None and gone["DesiredDescription"] != "alloc is being migrated"
    node = wait_for(
        lambda: (n := cluster.nomad.cluster.node_json("node-h1")) and not n["Drain"] and n,
        what="the drain to complete",
    )
    assert node["LastDrain"]["Status"] == "complete"
