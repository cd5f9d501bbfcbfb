"""The service end to end over HTTP against the Consul and Nomad stand-ins (no mocks)."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import (
    H100,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    service_config,
    status,
    wait_for,
)
from typer.testing import CliRunner

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.cli import app

# The decision core (scheduler.core.decide) lands separately; until then this module skips.
from scheduler.service.loop import Service


def _devices(job: dict) -> list[dict]:
    return [d for g in job["TaskGroups"] for t in g["Tasks"] for d in t["Resources"]["Devices"]]


def _node_pin(group: dict) -> str:
    return next(c["RTarget"] for c in group["Constraints"] if c["LTarget"] == "${node.unique.id}")


def test_demand_up_lands_a_job_with_the_device_block_then_down_stops_it(
    cluster: DevCluster, service: Service
) -> None:
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "tp2", "gpus": 2}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 5, "queued": 0})
    [job] = wait_for(lambda: our_jobs(cluster, "llama"), what="a llama job")
    [device] = _devices(job)
    assert device["Name"] == f"nvidia/gpu/{H100}"
    assert device["Count"] == 2
    wanted = set(device["Constraints"][0]["RTarget"].split(","))
    node = _node_pin(job["TaskGroups"][0])

    def placed() -> list[dict]:
        return [a for a in cluster.nomad.allocations(job["ID"]) if a["ClientStatus"] == "running"]

    [alloc] = wait_for(placed, what="a running allocation")
    assert alloc["NodeID"] == node  # it landed on the planned node
    got = {
        i
        for t in alloc["AllocatedResources"]["Tasks"].values()
        for d in t["Devices"]
        for i in d["DeviceIDs"]
    }
    assert got == wanted  # on the planned GPUs
    st = wait_for(lambda: (status(cluster, "llama") or {}).get("replicas"), what="status")
    assert st[0]["nodes"] == [node] and set(st[0]["devices"]) == wanted
    assert status(cluster, "llama")["desired"] == 1  # type: ignore[index]

    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 0, "queued": 0})
    wait_for(lambda: not our_jobs(cluster, "llama"), what="the job to stop")


def test_critical_model_preempts_opportunistic_replicas(
    cluster: DevCluster, service: Service
) -> None:
    # Opportunistic filler takes every whole H100 (2 nodes x 4).
    filler = model_value(
        [{"name": "one", "gpus": 4, "gpu_models": ["H100"]}],
        **{"class": "opportunistic", "scaling": {"min": 0, "max": 2, "target_per_replica": 1}},
    )
    put(cluster, LAYOUT.model_key("filler"), filler)
    put(cluster, LAYOUT.demand_key("filler"), {"inflight": 10})
    wait_for(lambda: len(our_jobs(cluster, "filler")) == 2, what="two filler jobs")
    before = {j["ID"] for j in our_jobs(cluster, "filler")}
    vip = model_value(
        [{"name": "tp4", "gpus": 4, "gpu_models": ["H100"]}],
        **{"class": "critical", "scaling": {"min": 1, "max": 1, "target_per_replica": 10}},
    )
    put(cluster, LAYOUT.model_key("vip"), vip)
    put(cluster, LAYOUT.demand_key("vip"), {"inflight": 1})
    wait_for(lambda: our_jobs(cluster, "vip"), timeout=10, what="the critical job")
    remaining = {j["ID"] for j in our_jobs(cluster, "filler")}
    assert len(remaining) == 1 and remaining < before
    [victim] = before - remaining
    # Really stopped: deregistered (then purged once its allocation is gone), no live alloc.
    assert not [
        a
        for a in cluster.nomad.allocations(victim)
        if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"
    ]


def test_mig_model_runs_on_a_mig_slice(cluster: DevCluster, service: Service) -> None:
    put(cluster, LAYOUT.model_key("tiny"), model_value([{"name": "mig", "mig_profile": "3g.40gb"}]))
    put(cluster, LAYOUT.demand_key("tiny"), {"inflight": 1})
    [job] = wait_for(lambda: our_jobs(cluster, "tiny"), what="a MIG job")
    [device] = _devices(job)
    assert device["Name"] == "nvidia/gpu/NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert device["Constraints"][0]["RTarget"].startswith("MIG-")
    [alloc] = wait_for(
        lambda: [a for a in cluster.nomad.allocations(job["ID"]) if a["ClientStatus"] == "running"],
        what="MIG allocation",
    )
    ids = [
        i
        for t in alloc["AllocatedResources"]["Tasks"].values()
        for d in t["Devices"]
        for i in d["DeviceIDs"]
    ]
    assert len(ids) == 1 and ids[0].startswith("MIG-")


def test_two_node_model_gets_two_groups_on_two_nodes(cluster: DevCluster, service: Service) -> None:
    put(cluster, LAYOUT.model_key("big"), model_value([{"name": "pp2", "gpus": 4, "shards": 2}]))
    put(cluster, LAYOUT.demand_key("big"), {"inflight": 1})
    [job] = wait_for(lambda: our_jobs(cluster, "big"), what="a two-node job")
    assert len(job["TaskGroups"]) == 2
    assert len({_node_pin(g) for g in job["TaskGroups"]}) == 2


def test_restart_rebuilds_state_without_duplicates(cluster: DevCluster) -> None:
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 15})
    first = Service(service_config(cluster))
    first.run_in_thread()
    wait_for(lambda: len(our_jobs(cluster, "llama")) == 2, what="two replicas")
    ids = sorted(j["ID"] for j in our_jobs(cluster, "llama"))
    first.stop()  # killed: session destroyed, nothing else cleaned up
    second = Service(service_config(cluster))
    second.run_in_thread()
    try:
        wait_for(lambda: second.leader.is_leader and second.passes >= 3, what="passes")
        assert sorted(j["ID"] for j in our_jobs(cluster, "llama")) == ids
        assert len(cluster.nomad.jobs()) == 2
    finally:
        second.stop()


def test_only_the_leader_acts_and_the_standby_takes_over(cluster: DevCluster) -> None:
    a = Service(service_config(cluster))
    b = Service(service_config(cluster))
    a.run_in_thread()
    wait_for(lambda: a.leader.is_leader, what="a leads")
    b.run_in_thread()
    try:
        put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
        put(cluster, LAYOUT.demand_key("llama"), {"inflight": 5})
        wait_for(lambda: our_jobs(cluster, "llama"), what="a job")
        wait_for(lambda: b.passes >= 2, what="b passes")
        assert not b.leader.is_leader
        assert len(our_jobs(cluster, "llama")) == 1
        a.stop()
        wait_for(lambda: b.leader.is_leader, what="takeover")
        put(cluster, LAYOUT.demand_key("llama"), {"inflight": 15})
        wait_for(lambda: len(our_jobs(cluster, "llama")) == 2, what="the new leader acts")
    finally:
        a.stop()
        b.stop()


def test_bad_kv_value_is_a_status_error_and_others_go_on(
    cluster: DevCluster, service: Service
) -> None:
    bad = model_value([{"name": "p"}])
    bad["scaling"]["min"] = -1
    put(cluster, LAYOUT.model_key("broken"), bad)
    put(cluster, LAYOUT.model_key("fine"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("fine"), {"inflight": 1})
    put(cluster, LAYOUT.quotas + "org/x", '{"owner": "org/y"}')
    st = wait_for(lambda: status(cluster, "broken"), what="status of the bad model")
    assert st["last_error"] == (
        "llm-scheduler/models/broken: scaling.min: Input should be greater than or equal to 0"
    )
    wait_for(lambda: our_jobs(cluster, "fine"), what="the good model still starts")
    errors = wait_for(
        lambda: (status(cluster, "_errors") or {}).get("errors"), what="general errors"
    )
    assert any("quotas/org/x: owner" in e for e in errors)
    # The status is written inside a pass, which counts itself just after: wait, not race.
    wait_for(lambda: service.passes > 0, what="a finished pass")
    assert service.last_read_error is None


def test_unreadable_nomad_means_nothing_destructive() -> None:
    import time

    from e2e_helpers import FAST_SETTINGS, small_fleet

    from llm_scheduler_standins.faults import Faults

    faults = Faults(seed=1)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
        put(dc, LAYOUT.demand_key("llama"), {"inflight": 5})
        svc = Service(service_config(dc))
        svc.run_in_thread()
        try:
            wait_for(lambda: our_jobs(dc, "llama"), what="a job")
            faults.set("/v1/allocations", error_rate=1.0)  # Nomad half-readable
            put(dc, LAYOUT.demand_key("llama"), {"inflight": 0})
            wait_for(lambda: svc.last_read_error, what="the read failure to be seen")
            time.sleep(1.0)
            assert our_jobs(dc, "llama"), "stopped a replica on partial data"
            faults.clear()
            wait_for(lambda: not our_jobs(dc, "llama"), what="the stop once Nomad reads again")
        finally:
            svc.stop()


def test_model_turned_invalid_keeps_its_replicas(cluster: DevCluster, service: Service) -> None:
    import time

    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "tp1", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 5})
    wait_for(lambda: our_jobs(cluster, "llama"), what="a job")
    put(cluster, LAYOUT.model_key("llama"), '{"owner": 7')  # broken JSON
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 0})  # would scale it to zero
    wait_for(
        lambda: "not valid JSON" in ((status(cluster, "llama") or {}).get("last_error") or ""),
        what="the error in the model's status",
    )
    time.sleep(0.8)
    assert our_jobs(cluster, "llama"), "a replica was stopped because its model went bad"


def test_a_model_short_of_room_says_in_its_status_what_each_profile_ran_into(
    cluster: DevCluster, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status record of a pending model carries `tried` (per filter, on how many nodes),
    so `llm-scheduler why` answers from it instead of deciding again; once it places, `tried`
    goes, and a placed model's record has none."""
    profiles = [{"name": "tp8", "gpus": 8}, {"name": "mig", "mig_profile": "7g.80gb"}]
    put(cluster, LAYOUT.model_key("big"), model_value(profiles, scaling={"min": 1, "max": 1}))
    st = wait_for(lambda: (status(cluster, "big") or {}).get("tried"), what="big's trials")
    assert [t["profile"] for t in st] == ["tp8", "mig"]
    # No node has 8 whole GPUs (two have 4, the third's one is in MIG mode); none has a
    # 7g.80gb slice.
    assert st[0]["short"] == {"gpu-count": 3}, st[0]
    assert st[0]["reasons"] == {"gpu-count": {"too few free GPUs": 3}}
    assert sum(st[1]["short"].values()) == 3, st[1]
    monkeypatch.setenv("CONSUL_HTTP_ADDR", cluster.consul_url)
    result = CliRunner().invoke(app, ["why", "big", "--json", "--prefix", LAYOUT.prefix])
    assert result.exit_code == 0, result.output
    why = json.loads(result.output)
    assert why["source"] == "status record"
    assert [t["profile"] for t in why["tried"]] == ["tp8", "mig"]
    # Placed: no `tried` in the record (nor in a model's that never waited).
    put(cluster, LAYOUT.model_key("big"), model_value([{"name": "one", "gpus": 1}],
                                                       scaling={"min": 1, "max": 1}))  # fmt: skip
    placed = wait_for(
        lambda: (s := status(cluster, "big")) and s["pending"] is None and s, what="big placed"
    )
    assert "tried" not in placed
