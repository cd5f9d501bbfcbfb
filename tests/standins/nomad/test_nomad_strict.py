"""The Nomad stand-in is as strict as a real server, through python-nomad.

Each test names the rule of the real server it follows (hashicorp/nomad @ aa026cc9).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from nomad.api.exceptions import BaseNomadException
from nomad_helpers import by_name, devices_of, fixture, gpu_job, wait_for

import nomad
from llm_scheduler_standins.conformance import assert_same_shape
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import GPU, Node


def _allocs(client: nomad.Nomad, job_id: str, namespace: str | None = None) -> list[dict]:
    allocs = client.job.get_allocations(job_id, namespace=namespace)
    return [a for a in allocs if a["DesiredStatus"] == "run"]


def _node(node_id: str, name: str, pool: str = "default", gpus: int = 2) -> Node:
    return Node(
        id=node_id,
        name=name,
        pool=pool,
        cpu_cores=16,
        memory_gb=64,
        gpus=[
            GPU(id=f"GPU-{name}-{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80)
            for i in range(gpus)
        ],
    )


@contextmanager
def _standin(fleet: list[Node], **kwargs: object) -> Iterator[tuple[NomadStandin, nomad.Nomad]]:
    standin = NomadStandin(fleet, load_delay_s=0.02, seed=3, **kwargs)  # type: ignore[arg-type]
    server = standin.start()
    try:
        yield standin, nomad.Nomad(host="127.0.0.1", port=server.port, timeout=10)
    finally:
        standin.stop()


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
    fleet = [_node("n-1", "gpu-1")]
    with _standin(fleet, reserved={"*": (8000, 16384)}) as (_, client):
        node = client.node.get_node("n-1")
        assert node["ReservedResources"]["Cpu"]["CpuShares"] == 8000
        assert node["ReservedResources"]["Memory"]["MemoryMB"] == 16384
        (stub,) = client.nodes.get_nodes(resources=True)
        assert stub["ReservedResources"]["Memory"]["MemoryMB"] == 16384
        # 64 GiB - 16 GiB reserved: 48 GiB fit, 49 do not.
        client.jobs.register_job(gpu_job("llm-fits", memory_mb=48 * 1024))
        assert len(_allocs(client, "llm-fits")) == 1
        client.job.deregister_job("llm-fits")
        response = client.jobs.register_job(gpu_job("llm-too-big", memory_mb=49 * 1024))
        assert _allocs(client, "llm-too-big") == []
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
    (held,) = _allocs(client, "batch-elsewhere", namespace="research")
    ours = client.jobs.register_job(gpu_job("llm-three", node_id=node.id, count=3))
    assert _allocs(client, "llm-three") == []
    failed = client.evaluation.get_evaluation(ours["EvalID"])["FailedTGAllocs"]["shard-0"]
    assert failed["DimensionExhausted"] == {"devices: no devices match request": 1}
    client.jobs.register_job(gpu_job("llm-two", node_id=node.id, count=2))
    (alloc,) = _allocs(client, "llm-two")
    assert not set(devices_of(client, alloc["ID"])) & set(devices_of(client, held["ID"]))


def test_placement_keeps_to_the_job_node_pool() -> None:
    """scheduler/feasible: nodes outside the job's NodePool are not even counted in the pool
    (NodesInPool); the default pool is "default", "all" spans every pool (Nomad 1.6.0+)."""
    fleet = [_node("n-a", "gpu-a"), _node("n-b", "gpu-b", pool="gpu")]
    with _standin(fleet) as (_, client):
        body = gpu_job("llm-pooled", count=2)
        response = client.jobs.register_job(body)
        (alloc,) = _allocs(client, "llm-pooled")
        assert alloc["NodeID"] == "n-a"
        body = gpu_job("llm-pinned-b", node_id="n-b")
        response = client.jobs.register_job(body)
        assert _allocs(client, "llm-pinned-b") == []
        evaluation = client.evaluation.get_evaluation(response["EvalID"])
        assert evaluation["FailedTGAllocs"]["shard-0"]["NodesInPool"] == 1
        body["Job"]["NodePool"] = "gpu"
        client.jobs.register_job(body)
        (alloc,) = _allocs(client, "llm-pinned-b")
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
        with _standin(fleet, short_devices=short) as (_, client):
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
            allocs = _allocs(client, "llm-wish")
            if short:
                (alloc,) = allocs
                assert devices_of(client, alloc["ID"]) == [a]
            else:
                assert allocs == []


# ------------------------------------------------------------------ drains


def _running(client: nomad.Nomad, job_id: str) -> dict:
    wait_for(lambda: [a["ClientStatus"] for a in _allocs(client, job_id)] == ["running"])
    return _allocs(client, job_id)[0]


def test_drain_holds_max_parallel_zero_until_the_deadline() -> None:
    """nomad/drainer/watch_jobs.go handleTaskGroup: numToDrain = healthy - (Count -
    MaxParallel), so `migrate { max_parallel = 0 }` keeps a count-1 allocation until the
    deadline notifier forces it; meanwhile the node reads Drain true with a DrainStrategy
    (DrainSpec fields flattened, ForceDeadline) and is ineligible. Once empty, DrainStrategy
    is null, LastDrain complete, and the node stays ineligible."""
    fleet = [_node("n-1", "gpu-1"), _node("n-2", "gpu-2")]
    with _standin(fleet) as (standin, client):
        held = gpu_job("llm-held", node_id="n-1")
        held["Job"]["TaskGroups"][0]["Migrate"] = {"MaxParallel": 0}
        client.jobs.register_job(held)
        alloc = _running(client, "llm-held")
        standin.drain_node("n-1", deadline_s=0.6)
        node = client.node.get_node("n-1")
        assert node["Drain"] is True
        assert node["DrainStrategy"]["Deadline"] == 600_000_000
        assert node["DrainStrategy"]["ForceDeadline"] > node["DrainStrategy"]["StartedAt"]
        assert node["SchedulingEligibility"] == "ineligible"
        assert next(n for n in client.nodes.get_nodes() if n["ID"] == "n-1")["Drain"] is True
        time.sleep(0.2)
        assert client.allocation.get_allocation(alloc["ID"])["DesiredStatus"] == "run"
        wait_for(lambda: client.node.get_node("n-1")["DrainStrategy"] is None, timeout=5)
        stopped = client.allocation.get_allocation(alloc["ID"])
        assert stopped["DesiredStatus"] == "stop"
        assert stopped["DesiredTransition"]["Migrate"] is True
        node = client.node.get_node("n-1")
        assert (node["Drain"], node["SchedulingEligibility"]) == (False, "ineligible")
        assert node["LastDrain"]["Status"] == "complete"


def test_drain_takes_a_default_count_one_group_at_once() -> None:
    """Default migrate max_parallel 1: a healthy count-1 group is drained the moment the drain
    starts (reference/nomad-notes.md section 7), and stopping our own allocation ends it."""
    fleet = [_node("n-1", "gpu-1"), _node("n-2", "gpu-2")]
    with _standin(fleet) as (standin, client):
        client.jobs.register_job(gpu_job("llm-default"))
        alloc = _running(client, "llm-default")
        standin.drain_node(alloc["NodeID"], deadline_s=3600)
        gone = client.allocation.get_allocation(alloc["ID"])
        assert gone["DesiredDescription"] == "alloc is being migrated"
        assert client.node.get_node(alloc["NodeID"])["DrainStrategy"] is None
        (replacement,) = _allocs(client, "llm-default")
        assert replacement["NodeID"] != alloc["NodeID"]


def test_drain_ends_when_the_held_allocation_is_stopped_by_its_owner() -> None:
    """A drain completes once no allocation is left on the node (drainer's `done`), before
    the deadline, when the job's owner stops the held allocation itself."""
    fleet = [_node("n-1", "gpu-1"), _node("n-2", "gpu-2")]
    with _standin(fleet) as (standin, client):
        held = gpu_job("llm-owner", node_id="n-1")
        held["Job"]["Migrate"] = {"MaxParallel": 0}
        client.jobs.register_job(held)
        _running(client, "llm-owner")
        standin.drain_node("n-1", deadline_s=3600)
        assert client.node.get_node("n-1")["Drain"] is True
        client.job.deregister_job("llm-owner")
        node = client.node.get_node("n-1")
        assert node["DrainStrategy"] is None and node["LastDrain"]["Status"] == "complete"


# ------------------------------------------------------------------ update strategy, deployments


def _service_job(job_id: str, node: str, update: dict | None) -> dict:
    body = gpu_job(job_id, node_id=node, service=job_id)
    if update is not None:
        body["Job"]["Update"] = update
    return body


def test_default_update_strategy_deploys_and_replaces_an_unhealthy_allocation() -> None:
    """Without an update block a service job gets api/jobs.go DefaultUpdateStrategy (health
    from checks, min_healthy_time 10s, healthy_deadline 5m, progress_deadline 10m): each
    version is a deployment. An allocation whose checks do not pass by healthy_deadline is
    unhealthy (client/allocrunner/health_hook.go) and, the deployment being active, replaced
    (nomad/deploymentwatcher allowReplacements); with no progress by the progress deadline the
    deployment fails. `update { max_parallel = 0 }` has no deployment: the same slow
    allocation is only marked unhealthy and keeps running (its load is not cut short).
    Times run at 1/500 of Nomad's: 5m -> 0.6 s, 10m -> 1.2 s."""
    fleet = [_node("n-1", "gpu-1"), _node("n-2", "gpu-2")]
    with _standin(fleet, health_time_scale=0.002, initial_check="critical") as (_, client):
        client.jobs.register_job(_service_job("llm-deploys", "n-1", None))
        client.jobs.register_job(_service_job("llm-no-deploy", "n-2", {"MaxParallel": 0}))
        job = client.job.get_job("llm-deploys")
        assert job["Update"]["HealthyDeadline"] == 300 * 10**9
        assert job["Update"]["ProgressDeadline"] == 600 * 10**9
        (first,) = _allocs(client, "llm-deploys")
        deployment = client.job.get_deployment("llm-deploys")
        assert deployment["Status"] == "running"
        assert client.allocation.get_allocation(first["ID"])["DeploymentID"] == deployment["ID"]
        assert client.job.get_deployment("llm-no-deploy") is None
        (slow,) = _allocs(client, "llm-no-deploy")
        assert client.allocation.get_allocation(slow["ID"])["DeploymentID"] == ""

        wait_for(lambda: client.allocation.get_allocation(first["ID"])["DesiredStatus"] == "stop")
        replaced = client.allocation.get_allocation(first["ID"])
        assert replaced["DeploymentStatus"]["Healthy"] is False
        assert replaced["DesiredDescription"] == "alloc was rescheduled because it failed"
        (second,) = _allocs(client, "llm-deploys")
        assert second["ID"] == replaced["NextAllocation"]
        wait_for(lambda: client.job.get_deployment("llm-deploys")["Status"] == "failed")
        failed = client.job.get_deployment("llm-deploys")
        assert failed["StatusDescription"] == "Failed due to progress deadline"

        # Without a deployment: unhealthy after the deadline, and still the same allocation.
        wait_for(
            lambda: (
                (client.allocation.get_allocation(slow["ID"])["DeploymentStatus"] or {}).get(
                    "Healthy"
                )
                is False
            )
        )
        assert [a["ID"] for a in _allocs(client, "llm-no-deploy")] == [slow["ID"]]
        assert client.allocation.get_allocation(slow["ID"])["ClientStatus"] == "running"


def test_passing_checks_make_a_deployment_successful() -> None:
    """Checks that pass for min_healthy_time make the allocation healthy; all healthy, the
    deployment is successful (Deployment completed successfully)."""
    fleet = [_node("n-1", "gpu-1")]
    with _standin(fleet, health_time_scale=0.002) as (standin, client):
        client.jobs.register_job(_service_job("llm-quick", "n-1", None))
        wait_for(lambda: client.job.get_deployment("llm-quick")["Status"] == "successful")
        deployment = client.job.get_deployment("llm-quick")
        assert deployment["StatusDescription"] == "Deployment completed successfully"
        assert deployment["TaskGroups"]["shard-0"]["HealthyAllocs"] == 1
        (alloc,) = _allocs(client, "llm-quick")
        assert alloc["DeploymentStatus"]["Healthy"] is True
        assert standin.cluster.deployment(deployment["ID"]) is not None
        # The documented body (job-deployment-latest.json); task group names are data.
        documented = fixture("job-deployment-latest.json")
        state, documented_state = deployment.pop("TaskGroups"), documented.pop("TaskGroups")
        assert_same_shape(deployment, documented, null_matches_any=True)
        # PlacedCanaries is a nil []string without canaries: null on the wire, as here.
        assert state["shard-0"].pop("PlacedCanaries") is None
        documented_state["cache"].pop("PlacedCanaries")
        assert_same_shape(state["shard-0"], documented_state["cache"], null_matches_any=True)
        assert [d["ID"] for d in client.job.get_deployments("llm-quick")] == [deployment["ID"]]


def test_system_job_allocations_count_against_the_node() -> None:
    """A system job's allocation on a node uses its CPU and memory like any other
    (nomad/structs/funcs.go AllocsFit sums every non-terminal allocation on the node)."""
    fleet = [_node("n-1", "gpu-1")]
    with _standin(fleet) as (_, client):
        agent = {
            "ID": "node-agent",
            "Type": "system",
            "TaskGroups": [
                {
                    "Name": "agent",
                    "Tasks": [
                        {
                            "Name": "agent",
                            "Driver": "docker",
                            "Resources": {"CPU": 500, "MemoryMB": 40 * 1024},
                        }
                    ],
                }
            ],
        }
        client.jobs.register_job({"Job": agent})
        assert len(_allocs(client, "node-agent")) == 1
        response = client.jobs.register_job(gpu_job("llm-big", memory_mb=32 * 1024))
        assert _allocs(client, "llm-big") == []  # 40 + 32 GiB > 64 GiB
        failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
        assert failed["shard-0"]["DimensionExhausted"] == {"memory": 1}
