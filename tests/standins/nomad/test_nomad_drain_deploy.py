"""The Nomad stand-in drains nodes and rolls out deployments as a real server does, through
python-nomad.

Each test names the rule of the real server it follows (hashicorp/nomad @ aa026cc9).
"""

from __future__ import annotations

import time

from nomad_helpers import fixture, gpu_job, nomad_standin, run_allocs, strict_node, wait_for

import nomad
from llm_scheduler_standins.conformance import assert_same_shape

# ------------------------------------------------------------------ drains


def _running(client: nomad.Nomad, job_id: str) -> dict:
    wait_for(lambda: [a["ClientStatus"] for a in run_allocs(client, job_id)] == ["running"])
    return run_allocs(client, job_id)[0]


def test_drain_holds_max_parallel_zero_until_the_deadline() -> None:
    """nomad/drainer/watch_jobs.go handleTaskGroup: numToDrain = healthy - (Count -
    MaxParallel), so `migrate { max_parallel = 0 }` keeps a count-1 allocation until the
    deadline notifier forces it; meanwhile the node reads Drain true with a DrainStrategy
    (DrainSpec fields flattened, ForceDeadline) and is ineligible. Once empty, DrainStrategy
    is null, LastDrain complete, and the node stays ineligible."""
    fleet = [strict_node("n-1", "gpu-1"), strict_node("n-2", "gpu-2")]
    with nomad_standin(fleet) as (standin, client):
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
    fleet = [strict_node("n-1", "gpu-1"), strict_node("n-2", "gpu-2")]
    with nomad_standin(fleet) as (standin, client):
        client.jobs.register_job(gpu_job("llm-default"))
        alloc = _running(client, "llm-default")
        standin.drain_node(alloc["NodeID"], deadline_s=3600)
        gone = client.allocation.get_allocation(alloc["ID"])
        assert gone["DesiredDescription"] == "alloc is being migrated"
        assert client.node.get_node(alloc["NodeID"])["DrainStrategy"] is None
        (replacement,) = run_allocs(client, "llm-default")
        assert replacement["NodeID"] != alloc["NodeID"]


def test_drain_ends_when_the_held_allocation_is_stopped_by_its_owner() -> None:
    """A drain completes once no allocation is left on the node (drainer's `done`), before
    the deadline, when the job's owner stops the held allocation itself."""
    fleet = [strict_node("n-1", "gpu-1"), strict_node("n-2", "gpu-2")]
    with nomad_standin(fleet) as (standin, client):
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
    fleet = [strict_node("n-1", "gpu-1"), strict_node("n-2", "gpu-2")]
    with nomad_standin(fleet, health_time_scale=0.002, initial_check="critical") as (_, client):
        client.jobs.register_job(_service_job("llm-deploys", "n-1", None))
        client.jobs.register_job(_service_job("llm-no-deploy", "n-2", {"MaxParallel": 0}))
        job = client.job.get_job("llm-deploys")
        assert job["Update"]["HealthyDeadline"] == 300 * 10**9
        assert job["Update"]["ProgressDeadline"] == 600 * 10**9
        (first,) = run_allocs(client, "llm-deploys")
        deployment = client.job.get_deployment("llm-deploys")
        assert deployment["Status"] == "running"
        assert client.allocation.get_allocation(first["ID"])["DeploymentID"] == deployment["ID"]
        assert client.job.get_deployment("llm-no-deploy") is None
        (slow,) = run_allocs(client, "llm-no-deploy")
        assert client.allocation.get_allocation(slow["ID"])["DeploymentID"] == ""

        wait_for(lambda: client.allocation.get_allocation(first["ID"])["DesiredStatus"] == "stop")
        replaced = client.allocation.get_allocation(first["ID"])
        assert replaced["DeploymentStatus"]["Healthy"] is False
        assert replaced["DesiredDescription"] == "alloc was rescheduled because it failed"
        (second,) = run_allocs(client, "llm-deploys")
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
        assert [a["ID"] for a in run_allocs(client, "llm-no-deploy")] == [slow["ID"]]
        assert client.allocation.get_allocation(slow["ID"])["ClientStatus"] == "running"


def test_passing_checks_make_a_deployment_successful() -> None:
    """Checks that pass for min_healthy_time make the allocation healthy; all healthy, the
    deployment is successful (Deployment completed successfully)."""
    fleet = [strict_node("n-1", "gpu-1")]
    with nomad_standin(fleet, health_time_scale=0.002) as (standin, client):
        client.jobs.register_job(_service_job("llm-quick", "n-1", None))
        wait_for(lambda: client.job.get_deployment("llm-quick")["Status"] == "successful")
        deployment = client.job.get_deployment("llm-quick")
        assert deployment["StatusDescription"] == "Deployment completed successfully"
        assert deployment["TaskGroups"]["shard-0"]["HealthyAllocs"] == 1
        (alloc,) = run_allocs(client, "llm-quick")
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
    fleet = [strict_node("n-1", "gpu-1")]
    with nomad_standin(fleet) as (_, client):
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
        assert len(run_allocs(client, "node-agent")) == 1
        response = client.jobs.register_job(gpu_job("llm-big", memory_mb=32 * 1024))
        assert run_allocs(client, "llm-big") == []  # 40 + 32 GiB > 64 GiB
        failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
        assert failed["shard-0"]["DimensionExhausted"] == {"memory": 1}
