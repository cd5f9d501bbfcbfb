"""Job, allocation and evaluation endpoints against the documented fixtures."""

from __future__ import annotations

import copy

import httpx
import pytest
from nomad_helpers import RecordingRegistry, by_name, fixture, gpu_job, wait_for

import nomad
from llm_scheduler_standins.conformance import assert_same_shape
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import Node


def rename(mapping: dict, old: str, new: str) -> None:
    """Group and task names are data: the doc's `cache`/`redis` are our `shard-0`/`vllm`."""
    mapping[new] = mapping.pop(old)


def _url(standin: NomadStandin) -> str:
    assert standin._server is not None
    return standin._server.url


def test_documented_register_request_is_accepted(client: nomad.Nomad) -> None:
    body = fixture("jobs-register-request.json")
    body["Job"]["NodePool"] = "default"  # the doc's "prod" pool has no nodes here
    response = client.jobs.register_job(body)
    assert_same_shape(response, fixture("jobs-register-response.json"))
    assert response["EvalID"] and response["JobModifyIndex"] > 0
    (alloc,) = client.job.get_allocations("cache")
    assert alloc["TaskGroup"] == "cache"


def test_documented_json_job_is_accepted(client: nomad.Nomad) -> None:
    body = fixture("job-json-example.json")
    body["Job"]["NodePool"] = "default"
    response = client.job.register_job("example", body)
    assert response["EvalID"]
    job = client.job.get_job("example")
    documented = fixture("job-read.json")
    # The documented job is a periodic, parameterized batch job; ours is a plain service.
    for key in ("Periodic", "ParameterizedJob"):
        documented[key] = None
    group = documented["TaskGroups"][0]
    group["Tasks"] = [group["Tasks"][1]]  # the doc's redis task (ours has no init task)
    task = group["Tasks"][0]
    for key in ("Services", "Templates", "Artifacts", "DispatchPayload", "Env", "Meta"):
        task[key] = None
    task["Config"] = {}
    task["Resources"].pop("Networks")
    group["Constraints"] = group["Affinities"] = group["Meta"] = None
    documented["Constraints"] = documented["Meta"] = None
    assert_same_shape(job, documented, null_matches_any=True)
    assert job["Namespace"] == "default" and job["Priority"] == 50 and job["Region"] == "global"


def test_job_list_shape_and_meta(client: nomad.Nomad) -> None:
    client.jobs.register_job(gpu_job("llm-list"))
    jobs = client.jobs.get_jobs()
    documented = fixture("jobs-list.json")[0]
    rename(documented["JobSummary"]["Summary"], "cache", "shard-0")
    assert_same_shape(jobs[0], documented)
    with_meta = client.jobs.get_jobs(meta=True)
    assert with_meta[0]["Meta"] == {"model": "llm-list"}
    assert client.jobs.get_jobs(prefix="nope") == []
    filtered = client.jobs.get_jobs(filter_='Meta.model == "llm-list"', meta=True)
    assert [j["ID"] for j in filtered] == ["llm-list"]


def test_allocation_shapes(client: nomad.Nomad, fleet: list[Node]) -> None:
    client.jobs.register_job(gpu_job("llm-shape", node_id=by_name(fleet, "gpu-h100-1").id))
    wait_for(lambda: client.job.get_allocations("llm-shape")[0]["ClientStatus"] == "running")
    (stub,) = client.job.get_allocations("llm-shape")
    documented_stub = fixture("job-allocations.json")[0]
    documented_stub["RescheduleTracker"] = None  # never rescheduled
    rename(documented_stub["TaskStates"], "redis", "vllm")
    documented_stub["TaskStates"]["vllm"]["FinishedAt"] = None  # still running: null
    assert_same_shape(stub, documented_stub, null_matches_any=True)
    assert "AllocatedResources" not in stub

    listed = client.allocations.get_allocations()
    documented_list = fixture("allocations-list.json")[0]
    rename(documented_list["TaskStates"], "redis", "vllm")
    assert_same_shape(listed[0], documented_list, null_matches_any=True)
    with_resources = client.allocations.get_allocations(resources=True)
    assert with_resources[0]["AllocatedResources"]["Tasks"]["vllm"]["Devices"]

    full = client.allocation.get_allocation(stub["ID"])
    documented = copy.deepcopy(fixture("allocation-read.json"))
    documented["RescheduleTracker"] = None
    documented["Job"]["TaskGroups"][0]["Tasks"][0]["Services"] = None
    documented["Job"]["TaskGroups"][0]["Tasks"][0]["Config"] = {}
    documented["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"].pop("Networks")
    for key in ("Resources", "SharedResources"):
        documented[key]["Networks"] = None
    documented["TaskResources"] = {"vllm": documented["TaskResources"]["redis"]}
    documented["TaskResources"]["vllm"]["Networks"] = None
    documented["TaskStates"] = {"vllm": documented["TaskStates"]["redis"]}
    for key in ("FinishedAt", "LastRestart"):  # never finished nor restarted: null
        documented["TaskStates"]["vllm"][key] = None
    documented["Metrics"]["Scores"] = {}
    documented["Job"]["TaskGroups"][0]["Tasks"][0].pop("Spreads")  # no such task field now
    assert_same_shape(full, documented, null_matches_any=True)
    task = full["AllocatedResources"]["Tasks"]["vllm"]
    assert set(task) >= {"Cpu", "Memory", "Devices", "Networks"}
    assert set(task["Devices"][0]) == {"Vendor", "Type", "Name", "DeviceIDs"}

    node_allocs = client.node.get_allocations(stub["NodeID"])
    assert any(a["ID"] == stub["ID"] and a["AllocatedResources"] for a in node_allocs)


def test_evaluation_shape(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-a100-1")
    client.jobs.register_job(gpu_job("llm-fill", node_id=node.id, count=8))
    response = client.jobs.register_job(gpu_job("llm-blocked", node_id=node.id))
    first = client.evaluation.get_evaluation(response["EvalID"])
    blocked = client.evaluation.get_evaluation(first["BlockedEval"])
    documented = fixture("evaluation-read.json")
    documented["FailedTGAllocs"] = {"shard-0": documented["FailedTGAllocs"]["cache"]}
    assert_same_shape(blocked, documented, null_matches_any=True)
    assert blocked["StatusDescription"] == "created to place remaining allocations"
    evals = client.job.get_evaluations("llm-blocked")
    assert {e["ID"] for e in evals} == {first["ID"], blocked["ID"]}
    documented_evals = fixture("job-evaluations.json")[0]
    rename(documented_evals["QueuedAllocations"], "cache", "shard-0")
    assert_same_shape(evals[0], documented_evals, null_matches_any=True)


def test_deregister_response_shape(client: nomad.Nomad) -> None:
    client.jobs.register_job(gpu_job("llm-dereg"))
    response = client.job.deregister_job("llm-dereg")
    assert_same_shape(response, fixture("job-deregister-response.json"))


def test_validation_errors_are_500_plain_text(standin: NomadStandin) -> None:
    url = _url(standin)
    no_groups = httpx.post(f"{url}/v1/jobs", json={"Job": {"ID": "x"}})
    assert no_groups.status_code == 500
    assert no_groups.headers["content-type"].startswith("text/plain")
    assert "Missing job task groups" in no_groups.text
    no_driver = httpx.post(
        f"{url}/v1/jobs",
        json={"Job": {"ID": "x", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t"}]}]}},
    )
    assert no_driver.status_code == 500
    assert "Task group g validation failed" in no_driver.text
    assert "Missing task driver" in no_driver.text
    assert httpx.post(f"{url}/v1/jobs", json={}).text == "Job must be specified"
    fractional = gpu_job("frac")
    fractional["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"][0]["Count"] = 1.5
    assert httpx.post(f"{url}/v1/jobs", json=fractional).status_code == 400
    mismatch = httpx.post(f"{url}/v1/job/other", json=gpu_job("x"))
    assert (mismatch.status_code, mismatch.text) == (400, "Job ID does not match name")


def test_zero_count_device_fails_placement(client: nomad.Nomad) -> None:
    response = client.jobs.register_job(gpu_job("llm-zero", count=0))
    failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
    assert failed["shard-0"]["DimensionExhausted"] == {
        "devices: invalid request of zero devices": 6
    }


def test_enforce_index_cas(standin: NomadStandin) -> None:
    url = _url(standin)
    body = {**gpu_job("llm-cas"), "EnforceIndex": True, "JobModifyIndex": 0}
    first = httpx.post(f"{url}/v1/jobs", json=body)
    assert first.status_code == 200
    again = httpx.post(f"{url}/v1/jobs", json=body)
    assert (again.status_code, again.text) == (
        500,
        "Enforcing job modify index 0: job already exists",
    )
    index = first.json()["JobModifyIndex"]
    stale = httpx.post(f"{url}/v1/jobs", json={**body, "JobModifyIndex": index + 100})
    assert stale.status_code == 500 and "conflicting job modify index" in stale.text
    changed = gpu_job("llm-cas", count=2)
    ok = httpx.post(
        f"{url}/v1/jobs", json={**changed, "EnforceIndex": True, "JobModifyIndex": index}
    )
    assert ok.status_code == 200 and ok.json()["JobModifyIndex"] > index


def test_read_headers_and_errors(standin: NomadStandin) -> None:
    url = _url(standin)
    answer = httpx.get(f"{url}/v1/nodes")
    assert int(answer.headers["X-Nomad-Index"]) >= 1
    assert answer.headers["X-Nomad-KnownLeader"] == "true"
    assert answer.headers["X-Nomad-LastContact"] == "0"
    missing = httpx.get(f"{url}/v1/job/nope")
    assert (missing.status_code, missing.text) == (404, "job not found")
    assert httpx.get(f"{url}/v1/allocation/nope").text == "alloc not found"
    assert httpx.get(f"{url}/v1/evaluation/nope").text == "eval not found"
    assert httpx.get(f"{url}/v1/nodes", params={"index": "x"}).text == "Invalid index"
    bad_wait = httpx.get(f"{url}/v1/nodes", params={"index": "1", "wait": "5 minutes"})
    assert (bad_wait.status_code, bad_wait.text) == (400, "Invalid wait time")
    assert httpx.get(f"{url}/v1/nodes", params={"resources": "maybe"}).status_code == 400


def test_namespaces_and_regions(client: nomad.Nomad, standin: NomadStandin) -> None:
    url = _url(standin)
    body = gpu_job("llm-ns")
    body["Job"]["Namespace"] = "team-a"
    assert httpx.post(f"{url}/v1/jobs", json=body).status_code == 200
    assert httpx.get(f"{url}/v1/job/llm-ns").status_code == 404
    in_ns = httpx.get(f"{url}/v1/job/llm-ns", params={"namespace": "team-a", "region": "global"})
    assert in_ns.json()["Namespace"] == "team-a"
    everywhere = httpx.get(f"{url}/v1/jobs", params={"namespace": "*"}).json()
    assert [j["Namespace"] for j in everywhere] == ["team-a"]
    scoped = nomad.Nomad(
        host="127.0.0.1",
        port=standin._server.port,  # type: ignore[union-attr]
        namespace="team-a",
        region="global",
    )
    assert [a["JobID"] for a in scoped.job.get_allocations("llm-ns")] == ["llm-ns"]
    elsewhere = httpx.get(f"{url}/v1/jobs", params={"region": "eu-west"})
    assert (elsewhere.status_code, elsewhere.text) == (500, "No path to region")


def test_services_registered_when_running_and_removed_on_stop(
    client: nomad.Nomad, registry: RecordingRegistry, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-2")
    client.jobs.register_job(gpu_job("llm-svc", node_id=node.id, service="llm-svc"))
    (alloc,) = client.job.get_allocations("llm-svc")
    assert registry.services == {}  # pending: not registered yet
    wait_for(lambda: bool(registry.services))
    (instance,) = registry.services.values()
    assert instance.id == f"_nomad-task-{alloc['ID']}-group-shard-0-llm-svc-http"
    assert instance.name == "llm-svc" and instance.check_status == "passing"
    assert (instance.node_id, instance.node_name) == (node.id, node.name)
    full = client.allocation.get_allocation(alloc["ID"])
    (port,) = full["AllocatedResources"]["Shared"]["Ports"]
    assert port["Label"] == "http" and instance.port == port["Value"] and port["To"] == 8000
    assert instance.tags == ("llm",) and instance.meta["external-source"] == "nomad"
    client.job.deregister_job("llm-svc")
    assert registry.services == {}


def test_task_services_use_the_task_name(client: nomad.Nomad, registry: RecordingRegistry) -> None:
    body = gpu_job("llm-tsvc", service="ignored")
    group = body["Job"]["TaskGroups"][0]
    group["Tasks"][0]["Services"] = group.pop("Services")
    client.jobs.register_job(body)
    wait_for(lambda: bool(registry.services))
    (service_id,) = registry.services
    assert service_id.endswith("-vllm-ignored-http")


def test_service_check_can_be_failed(
    standin: NomadStandin, client: nomad.Nomad, registry: RecordingRegistry
) -> None:
    client.jobs.register_job(gpu_job("llm-chk", service="llm-chk"))
    wait_for(lambda: bool(registry.services))
    (alloc,) = client.job.get_allocations("llm-chk")
    standin.set_service_check(alloc["ID"], "critical")
    assert [s.check_status for s in registry.services.values()] == ["critical"]


@pytest.mark.parametrize("value", ["True", "true", "1", "t"])
def test_python_nomad_bools_are_accepted(standin: NomadStandin, value: str) -> None:
    answer = httpx.get(f"{_url(standin)}/v1/nodes", params={"resources": value})
    assert "NodeResources" in answer.json()[0]
