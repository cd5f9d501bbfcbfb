"""Device placement through python-nomad: pinning, MIG slices, blocked evaluations, freeing."""

from __future__ import annotations

import pytest
from nomad_helpers import by_name, devices_of, gpu_job, wait_for

import nomad
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.core.models import Node


def _allocs(client: nomad.Nomad, job_id: str, live: bool = True) -> list[dict]:
    allocs = client.job.get_allocations(job_id)
    return [a for a in allocs if not live or a["DesiredStatus"] == "run"]


def test_two_gpus_on_the_pinned_node(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-h100-2")
    client.jobs.register_job(gpu_job("llm-a-r1", node_id=node.id, count=2))
    (alloc,) = _allocs(client, "llm-a-r1")
    assert alloc["NodeID"] == node.id
    ids = devices_of(client, alloc["ID"])
    assert len(ids) == 2 and len(set(ids)) == 2
    assert set(ids) <= {g.id for g in node.gpus}
    full = client.allocation.get_allocation(alloc["ID"])
    (device,) = full["AllocatedResources"]["Tasks"]["vllm"]["Devices"]
    assert (device["Vendor"], device["Type"], device["Name"]) == (
        "nvidia",
        "gpu",
        "NVIDIA H100 80GB HBM3",
    )


def test_allocation_goes_pending_then_running(client: nomad.Nomad, fleet: list[Node]) -> None:
    client.jobs.register_job(gpu_job("llm-b-r1", node_id=by_name(fleet, "gpu-h100-1").id))
    (alloc,) = _allocs(client, "llm-b-r1")
    assert alloc["ClientStatus"] == "pending" and alloc["DesiredStatus"] == "run"
    wait_for(lambda: _allocs(client, "llm-b-r1")[0]["ClientStatus"] == "running")
    running = _allocs(client, "llm-b-r1")[0]
    assert running["TaskStates"]["vllm"]["State"] == "running"
    assert client.job.get_job("llm-b-r1")["Status"] == "running"


def test_instances_are_exclusive(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-a100-1")
    seen: set[str] = set()
    for i in range(4):
        client.jobs.register_job(gpu_job(f"llm-x-r{i}", node_id=node.id, count=2))
        (alloc,) = _allocs(client, f"llm-x-r{i}")
        ids = devices_of(client, alloc["ID"])
        assert not seen & set(ids)
        seen |= set(ids)
    assert seen == {g.id for g in node.gpus}
    evaluation = client.evaluation.get_evaluation(
        client.jobs.register_job(gpu_job("llm-x-r9", node_id=node.id))["EvalID"]
    )
    assert evaluation["FailedTGAllocs"]["shard-0"]["DimensionExhausted"] == {
        "devices: no devices match request": 1
    }


def test_pinned_ids_are_honoured(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-h100-3")
    wanted = [node.gpus[5].id, node.gpus[6].id]
    constraint = {
        "LTarget": "${device.ids}",
        "RTarget": ",".join(wanted),
        "Operand": "set_contains_any",
    }
    client.jobs.register_job(
        gpu_job("llm-pin", node_id=node.id, count=2, device_constraints=[constraint])
    )
    (alloc,) = _allocs(client, "llm-pin")
    assert sorted(devices_of(client, alloc["ID"])) == sorted(wanted)


def test_mig_slices_one_per_allocation(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-a100-mig-1")
    group = "nvidia/gpu/NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    slices = {s.id for g in node.gpus for s in g.mig or [] if s.profile == "3g.40gb"}
    got: list[str] = []
    for i in range(len(slices)):
        client.jobs.register_job(gpu_job(f"llm-mig-{i}", device=group))
        (alloc,) = _allocs(client, f"llm-mig-{i}")
        assert alloc["NodeID"] == node.id
        (slice_id,) = devices_of(client, alloc["ID"])
        got.append(slice_id)
    assert sorted(got) == sorted(slices)
    response = client.jobs.register_job(gpu_job("llm-mig-extra", device=group))
    evaluation = client.evaluation.get_evaluation(response["EvalID"])
    assert evaluation["BlockedEval"]


def test_memory_constraint_converts_units(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-a100-mig-1")
    small = {"LTarget": "${device.attr.memory}", "RTarget": "15 GiB", "Operand": "<"}
    client.jobs.register_job(gpu_job("llm-tiny", node_id=node.id, device_constraints=[small]))
    (alloc,) = _allocs(client, "llm-tiny")
    full = client.allocation.get_allocation(alloc["ID"])
    (device,) = full["AllocatedResources"]["Tasks"]["vllm"]["Devices"]
    assert device["Name"] == "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    unitless = {"LTarget": "${device.attr.memory}", "RTarget": "15000", "Operand": "<"}
    response = client.jobs.register_job(
        gpu_job("llm-unitless", node_id=node.id, device_constraints=[unitless])
    )
    # A number with a unit never compares with one without (Nomad's Attribute.Comparable).
    failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
    filtered = failed["shard-0"]["ConstraintFiltered"]
    assert filtered["missing devices"] == 1
    assert filtered[f"${{node.unique.id}} = {node.id}"] == 5  # the other nodes


def test_model_constraint_and_name_forms(client: nomad.Nomad, fleet: list[Node]) -> None:
    model = {"LTarget": "${device.model}", "RTarget": "NVIDIA A100-SXM4-80GB", "Operand": "="}
    client.jobs.register_job(gpu_job("llm-a100", device="gpu", device_constraints=[model]))
    (alloc,) = _allocs(client, "llm-a100")
    assert alloc["NodeName"].startswith("gpu-a100")


def test_unplaceable_job_is_blocked_then_placed_when_room_appears(
    client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-1")
    client.jobs.register_job(gpu_job("llm-big", node_id=node.id, count=8))
    response = client.jobs.register_job(gpu_job("llm-waiting", node_id=node.id, count=2))
    evaluation = client.evaluation.get_evaluation(response["EvalID"])
    assert evaluation["Status"] == "complete"
    failed = evaluation["FailedTGAllocs"]["shard-0"]
    assert failed["DimensionExhausted"] == {"devices: no devices match request": 1}
    blocked = client.evaluation.get_evaluation(evaluation["BlockedEval"])
    assert blocked["Status"] == "blocked"
    assert blocked["TriggeredBy"] == "queued-allocs"
    assert blocked["QueuedAllocations"] == {"shard-0": 1}
    assert _allocs(client, "llm-waiting") == []
    summary = client.job.get_summary("llm-waiting")
    assert summary["Summary"]["shard-0"]["Queued"] == 1

    client.job.deregister_job("llm-big")
    (alloc,) = _allocs(client, "llm-waiting")
    assert len(devices_of(client, alloc["ID"])) == 2
    assert client.evaluation.get_evaluation(blocked["ID"])["Status"] == "complete"


def test_too_many_gpus_is_missing_devices(client: nomad.Nomad, fleet: list[Node]) -> None:
    response = client.jobs.register_job(gpu_job("llm-huge", count=9))
    failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]["shard-0"]
    assert failed["ConstraintFiltered"] == {"missing devices": 6}
    assert failed["NodesEvaluated"] == 6


def test_deregister_frees_devices_and_stops_allocations(
    client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-2")
    client.jobs.register_job(gpu_job("llm-full", node_id=node.id, count=8))
    (alloc,) = _allocs(client, "llm-full")
    response = client.job.deregister_job("llm-full")
    assert response["EvalID"] and response["JobModifyIndex"] > 0
    stopped = client.allocation.get_allocation(alloc["ID"])
    assert stopped["DesiredStatus"] == "stop" and stopped["ClientStatus"] == "complete"
    job = client.job.get_job("llm-full")
    assert job["Stop"] is True and job["Status"] == "dead"
    client.jobs.register_job(gpu_job("llm-next", node_id=node.id, count=8))
    (again,) = _allocs(client, "llm-next")
    assert sorted(devices_of(client, again["ID"])) == sorted(g.id for g in node.gpus)


def test_purge_removes_the_job(client: nomad.Nomad, fleet: list[Node]) -> None:
    client.jobs.register_job(gpu_job("llm-purge"))
    client.job.deregister_job("llm-purge", purge=True)
    with pytest.raises(nomad.api.exceptions.URLNotFoundNomadException):
        client.job.get_job("llm-purge")


def test_deregister_unknown_job_is_ok_with_empty_eval(client: nomad.Nomad) -> None:
    response = client.job.deregister_job("no-such-job")
    assert response["EvalID"] == "" and response["EvalCreateIndex"] == 0


def test_unhealthy_and_ineligible_take_nothing_new(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-h100-3")
    sick = node.gpus[0].id
    standin.set_gpu_health(node.id, sick, False)
    client.jobs.register_job(gpu_job("llm-h", node_id=node.id, count=7))
    (alloc,) = _allocs(client, "llm-h")
    assert sick not in devices_of(client, alloc["ID"])
    response = client.jobs.register_job(gpu_job("llm-h2", node_id=node.id))
    blocked_id = client.evaluation.get_evaluation(response["EvalID"])["BlockedEval"]
    assert blocked_id
    standin.set_gpu_health(node.id, sick, True)  # room appears: the blocked eval runs again
    (placed,) = _allocs(client, "llm-h2")
    assert devices_of(client, placed["ID"]) == [sick]

    other = by_name(fleet, "gpu-a100-2")
    standin.set_node_eligibility(other.id, False)
    response = client.jobs.register_job(gpu_job("llm-inel", node_id=other.id))
    assert client.evaluation.get_evaluation(response["EvalID"])["BlockedEval"]
    standin.set_node_eligibility(other.id, True)
    assert len(_allocs(client, "llm-inel")) == 1


def test_cpu_and_memory_are_not_overcommitted(client: nomad.Nomad, fleet: list[Node]) -> None:
    node = by_name(fleet, "gpu-a100-2")  # 128 cores, 1024 GB
    client.jobs.register_job(gpu_job("llm-mem", node_id=node.id, memory_mb=900 * 1024))
    response = client.jobs.register_job(gpu_job("llm-mem2", node_id=node.id, memory_mb=200 * 1024))
    failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]
    assert failed["shard-0"]["DimensionExhausted"] == {"memory": 1}


def test_group_count_places_several_allocations(client: nomad.Nomad) -> None:
    client.jobs.register_job(gpu_job("llm-many", count=1, group_count=3))
    allocs = _allocs(client, "llm-many")
    assert sorted(a["Name"] for a in allocs) == [
        "llm-many.shard-0[0]",
        "llm-many.shard-0[1]",
        "llm-many.shard-0[2]",
    ]
    ids = [i for a in allocs for i in devices_of(client, a["ID"])]
    assert len(set(ids)) == 3


def test_update_replaces_allocations_and_same_spec_does_not(client: nomad.Nomad) -> None:
    first = client.jobs.register_job(gpu_job("llm-upd"))
    (alloc,) = _allocs(client, "llm-upd")
    same = client.jobs.register_job(gpu_job("llm-upd"))
    assert same["JobModifyIndex"] == first["JobModifyIndex"]
    assert [a["ID"] for a in _allocs(client, "llm-upd")] == [alloc["ID"]]
    changed = client.jobs.register_job(gpu_job("llm-upd", count=2))
    assert changed["JobModifyIndex"] > first["JobModifyIndex"]
    (new,) = _allocs(client, "llm-upd")
    assert new["ID"] != alloc["ID"] and new["JobVersion"] == 1
    assert len(devices_of(client, new["ID"])) == 2


def test_failed_allocation_is_replaced(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    client.jobs.register_job(gpu_job("llm-fail", node_id=by_name(fleet, "gpu-h100-1").id))
    (alloc,) = _allocs(client, "llm-fail")
    replacement = standin.fail_allocation(alloc["ID"])
    old = client.allocation.get_allocation(alloc["ID"])
    assert old["ClientStatus"] == "failed" and old["NextAllocation"] == replacement
    assert client.allocation.get_allocation(replacement)["PreviousAllocation"] == alloc["ID"]


def test_node_down_loses_allocations_and_replaces_them(
    standin: NomadStandin, client: nomad.Nomad, fleet: list[Node]
) -> None:
    node = by_name(fleet, "gpu-a100-1")
    client.jobs.register_job(gpu_job("llm-free", count=2))
    client.jobs.register_job(gpu_job("llm-pinned", node_id=node.id))
    free_node = _allocs(client, "llm-free")[0]["NodeID"]
    standin.set_node_status(free_node, "down")
    lost = [a for a in client.job.get_allocations("llm-free") if a["NodeID"] == free_node]
    assert [a["ClientStatus"] for a in lost] == ["lost"]
    (replacement,) = _allocs(client, "llm-free")
    assert replacement["NodeID"] != free_node
    standin.set_node_status(node.id, "down")
    evals = client.job.get_evaluations("llm-pinned")
    assert any(e["Status"] == "blocked" for e in evals)
    standin.set_node_status(node.id, "ready")
    (back,) = _allocs(client, "llm-pinned")
    assert back["NodeID"] == node.id


def test_concurrent_registrations_never_share_a_gpu(client: nomad.Nomad, fleet: list[Node]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    node = by_name(fleet, "gpu-h100-1")

    def register(i: int) -> None:
        client.jobs.register_job(gpu_job(f"llm-c{i}", node_id=node.id))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(register, range(12)))
    placed = [a for i in range(12) for a in _allocs(client, f"llm-c{i}")]
    ids = [d for a in placed for d in devices_of(client, a["ID"])]
    assert len(placed) == 8 and sorted(ids) == sorted(g.id for g in node.gpus)


def test_stop_delay_keeps_client_running_but_frees_devices(fleet: list[Node]) -> None:
    standin = NomadStandin(fleet, load_delay_s=0.01, stop_delay_s=0.3, seed=1)
    server = standin.start()
    try:
        client = nomad.Nomad(host="127.0.0.1", port=server.port)
        node = by_name(fleet, "gpu-h100-2")
        client.jobs.register_job(gpu_job("llm-slow", node_id=node.id, count=8))
        wait_for(lambda: _allocs(client, "llm-slow")[0]["ClientStatus"] == "running")
        (alloc,) = _allocs(client, "llm-slow")
        client.job.deregister_job("llm-slow")
        stopping = client.allocation.get_allocation(alloc["ID"])
        assert (stopping["DesiredStatus"], stopping["ClientStatus"]) == ("stop", "running")
        client.jobs.register_job(gpu_job("llm-next", node_id=node.id, count=8))
        assert len(_allocs(client, "llm-next")) == 1
        wait_for(
            lambda: client.allocation.get_allocation(alloc["ID"])["ClientStatus"] == "complete"
        )
    finally:
        standin.stop()


def test_drain_migrates_allocations_and_eligibility_toggles(
    client: nomad.Nomad, fleet: list[Node]
) -> None:
    from nomad_helpers import fixture

    client.jobs.register_job(gpu_job("llm-drain", count=4))
    (alloc,) = _allocs(client, "llm-drain")
    node_id = alloc["NodeID"]
    # The drainer counts only allocations with health (nomad/drainer/watch_jobs.go).
    wait_for(lambda: _allocs(client, "llm-drain")[0]["ClientStatus"] == "running")
    request = fixture("node-drain-request.json")
    response = client.node.drain_node_with_spec(node_id, request["DrainSpec"])
    assert set(response) >= set(fixture("node-drain-response.json"))
    assert response["EvalIDs"]
    node = client.node.get_node(node_id)
    assert node["SchedulingEligibility"] == "ineligible"
    assert node["LastDrain"]["Status"] == "complete"
    moved = client.allocation.get_allocation(alloc["ID"])
    assert moved["DesiredDescription"] == "alloc is being migrated"
    (replacement,) = _allocs(client, "llm-drain")
    assert replacement["NodeID"] != node_id
    eligible = client.node.eligible_node(node_id, eligible=True)
    assert set(eligible) >= set(fixture("node-eligibility-response.json"))
    assert client.node.get_node(node_id)["SchedulingEligibility"] == "eligible"


def test_node_name_constraints(client: nomad.Nomad) -> None:
    body = gpu_job("llm-names", group_count=3)
    body["Job"]["Constraints"] = [
        {"LTarget": "${node.unique.name}", "RTarget": "^gpu-a100", "Operand": "regexp"},
        {"LTarget": "${node.unique.name}", "RTarget": "gpu-a100-1", "Operand": "!="},
        {"LTarget": "${attr.os.signals}", "RTarget": "SIGTERM,SIGINT", "Operand": "set_contains"},
        {"Operand": "distinct_hosts", "RTarget": "true"},
    ]
    response = client.jobs.register_job(body)
    names = sorted(a["NodeName"] for a in _allocs(client, "llm-names"))
    assert names == ["gpu-a100-2", "gpu-a100-mig-1"]  # two hosts qualify, one alloc each
    failed = client.evaluation.get_evaluation(response["EvalID"])["FailedTGAllocs"]["shard-0"]
    assert failed["ConstraintFiltered"]["distinct_hosts"] == 2
