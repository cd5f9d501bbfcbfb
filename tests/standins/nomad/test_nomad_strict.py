"""The Nomad stand-in is as strict as a real server, through python-nomad.

Each test names the rule of the real server it follows (hashicorp/nomad @ aa026cc9).
"""

from __future__ import annotations

import pytest
from nomad.api.exceptions import BaseNomadException
from nomad_helpers import (
    by_name,
    devices_of,
    gpu_job,
    nomad_standin,
    run_allocs,
    strict_node,
)

import nomad
from scheduler.core.models import Node

# ------------------------------------------------------------------ Job.Validate


def test_service_name_must_be_rfc1123(client: nomad.Nomad) -> None:
    """nomad/structs/services.go Service.ValidateName: `^(?i:[a-z0-9]|[a-z0-9][a-z0-9\\-]{0,61}
    [a-z0-9])$`, reported by TaskGroup.validateServices inside Job.Validate; the HTTP layer
    answers a validation error with 500 (command/agent/http.go wrap)."""
    body = gpu_job("llm-dotted", service="llm-qwen-2.5-32b")
    with pytest.raises(BaseNomadException) as caught:
        client.jobs.register_job(body)
    resp = caught.value.nomad_resp
    assert resp.status_code == 500
    assert "Task group shard-0 validation failed" in resp.text
    assert "Task group service validation failed" in resp.text
    assert (
        "Service name must be valid per RFC 1123 and can contain only alphanumeric characters"
        ' or dashes and must be no longer than 63 characters: "llm-qwen-2.5-32b"'
    ) in resp.text
    assert client.jobs.get_jobs(prefix="llm-dotted") == []
    # 63 characters pass, 64 do not; interpolations are checked as a placeholder.
    client.jobs.register_job(gpu_job("llm-ok-63", service="a" * 63))
    client.jobs.register_job(gpu_job("llm-ok-env", service="llm-${NOMAD_JOB_NAME}"))
    with pytest.raises(BaseNomadException):
        client.jobs.register_job(gpu_job("llm-long", service="a" * 64))


def test_priority_and_ids_validated_together(client: nomad.Nomad) -> None:
    """nomad/job_endpoint_hooks.go jobValidate.Validate: Job.Validate's errors and "job priority
    must be between [1, 100]" in one multierror."""
    body = gpu_job("llm-bad id", service="ok")
    body["Job"]["Priority"] = 101
    with pytest.raises(BaseNomadException) as caught:
        client.jobs.register_job(body)
    text = caught.value.nomad_resp.text
    assert text.startswith("2 errors occurred:")
    assert "\t* Job ID contains a space\n" in text
    assert "\t* job priority must be between [1, 100]\n" in text


def test_update_and_migrate_blocks_validated(client: nomad.Nomad) -> None:
    """TaskGroup.Validate runs UpdateStrategy.Validate and MigrateStrategy.Validate
    (nomad/structs/structs.go); `max_parallel = 0` is legal in both (no deployment; a drain
    holds the allocation until its deadline)."""
    body = gpu_job("llm-bad-strategy")
    group = body["Job"]["TaskGroups"][0]
    group["Update"] = {"MaxParallel": -1, "HealthyDeadline": 5 * 10**9}
    group["Migrate"] = {"MaxParallel": -2}
    with pytest.raises(BaseNomadException) as caught:
        client.jobs.register_job(body)
    text = caught.value.nomad_resp.text
    assert "Max parallel can not be less than zero: -1 < 0" in text
    assert "Minimum healthy time must be less than healthy deadline: 10s > 5s" in text
    assert "MaxParallel must be >= 0 but found -2" in text
    group["Update"] = {"MaxParallel": 0}
    group["Migrate"] = {"MaxParallel": 0}
    client.jobs.register_job(body)
    job = client.job.get_job("llm-bad-strategy")
    assert job["TaskGroups"][0]["Migrate"]["HealthCheck"] == "checks"  # canonicalized
    batch = gpu_job("batch-migrate")
    batch["Job"]["Type"] = "batch"
    batch["Job"]["TaskGroups"][0]["Migrate"] = {"MaxParallel": 1}
    with pytest.raises(BaseNomadException) as caught:
        client.jobs.register_job(batch)
    assert 'Job type "batch" does not allow migrate block' in caught.value.nomad_resp.text


# ------------------------------------------------------------------ resources


def test_reserved_resources_are_shown_and_kept_back() -> None:
    """Nomad subtracts a node's ReservedResources (client `reserved` block) before placing
    (nomad/structs/funcs.go AllocsFit:
    `available.Subtract(node.ReservedResources.Comparable())`)."""
    fleet = [strict_node("n-1", "gpu-1")]
    with nomad_standin(fleet, reserved={"*": (8000, 16384)}) as (_, client):
        node = client.node.get_node("n-1")
        assert node["ReservedResources"]["Cpu"]["CpuShares"] == 8000
        assert node["ReservedResources"]["Memory"]["MemoryMB"] == 16384
        (stub,) = client.nodes.get_nodes(resources=True)
        assert stub["ReservedResources"]["Memory"]["MemoryMB"] == 16384
        # 64 GiB - 16 GiB reserved: 48 GiB fit, 49 do not.
        client.jobs.register_job(gpu_job("llm-fits", memory_mb=48 * 1024))
        assert len(run_allocs(client, "llm-fits")) == 1
        client.job.deregister_job("llm-fits")
        response = client.jobs.register_job(gpu_job("llm-too-big", memory_mb=49 * 1024))
        assert run_allocs(client, "llm-too-big") == []
        failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
        assert failed["shard-0"]["DimensionExhausted"] == {"memory": 1}


def test_allocations_of_every_namespace_hold_devices(
    client: nomad.Nomad, fleet: list[Node]
) -> None:
    """Devices are exclusive across namespaces: the DeviceAccounter counts every non-terminal
    allocation on the node (nomad/structs/devices.go AddAllocs), whatever its job's namespace."""
    node = by_name(fleet, "gpu-h100-1")
    other = gpu_job("batch-elsewhere", node_id=node.id, count=6)
    other["Job"]["Namespace"] = "research"
    client.jobs.register_job(other)
    (held,) = run_allocs(client, "batch-elsewhere", namespace="research")
    ours = client.jobs.register_job(gpu_job("llm-three", node_id=node.id, count=3))
    assert run_allocs(client, "llm-three") == []
    failed = client.evaluation.get_evaluation(ours["EvalID"])["FailedTGAllocs"]["shard-0"]
    assert failed["DimensionExhausted"] == {"devices: no devices match request": 1}
    client.jobs.register_job(gpu_job("llm-two", node_id=node.id, count=2))
    (alloc,) = run_allocs(client, "llm-two")
    assert not set(devices_of(client, alloc["ID"])) & set(devices_of(client, held["ID"]))


def test_placement_keeps_to_the_job_node_pool() -> None:
    """scheduler/feasible: nodes outside the job's NodePool are not even counted in the pool
    (NodesInPool); the default pool is "default", "all" spans every pool (Nomad 1.6.0+)."""
    fleet = [strict_node("n-a", "gpu-a"), strict_node("n-b", "gpu-b", pool="gpu")]
    with nomad_standin(fleet) as (_, client):
        body = gpu_job("llm-pooled", count=2)
        response = client.jobs.register_job(body)
        (alloc,) = run_allocs(client, "llm-pooled")
        assert alloc["NodeID"] == "n-a"
        body = gpu_job("llm-pinned-b", node_id="n-b")
        response = client.jobs.register_job(body)
        assert run_allocs(client, "llm-pinned-b") == []
        evaluation = client.evaluation.get_evaluation(response["EvalID"])
        assert evaluation["FailedTGAllocs"]["shard-0"]["NodesInPool"] == 1
        body["Job"]["NodePool"] = "gpu"
        client.jobs.register_job(body)
        (alloc,) = run_allocs(client, "llm-pinned-b")
        assert alloc["NodeID"] == "n-b"


# ------------------------------------------------------------------ blocked evaluations


def test_unplaceable_register_yields_blocked_eval_and_no_allocation(
    client: nomad.Nomad, fleet: list[Node]
) -> None:
    """scheduler/generic_sched.go: a placement that fails records FailedTGAllocs on the
    evaluation, which completes, and createBlockedEval adds a "blocked" one (BlockedEval);
    no allocation is written (evaluation-read.json has the shape)."""
    node = by_name(fleet, "gpu-h100-1")
    response = client.jobs.register_job(gpu_job("llm-nine", node_id=node.id, count=9))
    assert client.job.get_allocations("llm-nine") == []
    evaluation = client.evaluation.get_evaluation(response["EvalID"])
    assert evaluation["Status"] == "complete"
    failed = evaluation["FailedTGAllocs"]["shard-0"]
    assert failed["ConstraintFiltered"]["missing devices"] == 1
    blocked = client.evaluation.get_evaluation(evaluation["BlockedEval"])
    assert blocked["Status"] == "blocked"
    assert blocked["FailedTGAllocs"]["shard-0"]["ConstraintFiltered"]
    listed = client.job.get_evaluations("llm-nine")
    assert {e["Status"] for e in listed} == {"complete", "blocked"}


# ------------------------------------------------------------------ short device allocations


def test_short_device_switch_places_fewer_instances_than_asked(fleet: list[Node]) -> None:
    """Nomad 1.9.0 to 1.11.0 placed an allocation whose `${device.ids}` wish was partly busy
    with the free wished instances only (nomad#18364 shows the unwarned placement; fixed in
    1.11.1). Off by default; the switch lets the scheduler's guard be tested."""
    node = by_name(fleet, "gpu-h100-1")
    a, b = node.gpus[0].id, node.gpus[1].id
    wish = [{"LTarget": "${device.ids}", "RTarget": f"{a},{b}", "Operand": "set_contains_any"}]
    for short in (False, True):
        with nomad_standin(fleet, short_devices=short) as (_, client):
            client.jobs.register_job(
                gpu_job(
                    "other",
                    node_id=node.id,
                    device_constraints=[
                        {"LTarget": "${device.ids}", "RTarget": b, "Operand": "set_contains_any"}
                    ],
                )
            )
            client.jobs.register_job(
                gpu_job("llm-wish", node_id=node.id, count=2, device_constraints=wish)
            )
            allocs = run_allocs(client, "llm-wish")
            if short:
                (alloc,) = allocs
                assert devices_of(client, alloc["ID"]) == [a]
            else:
                assert allocs == []
