"""Model lifecycle end to end, the service against the stand-ins over HTTP:
rolling updates (and a roll-out that fails), moving back to the preferred profile, one
datacenter and rack for a multi-node replica, and the cheapest GPU type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_helpers import (
    A100,
    FAST_SETTINGS,
    H100,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    small_fleet,
    start_leader,
    status,
    wait_for,
)
from test_nomad_reality_e2e import SCHEDULER_TOKEN, foreign_job, hide_namespace_from_scheduler

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.faults import Faults
from scheduler.adapters.nomad_jobs import SPEC_META
from scheduler.core.models import GPU, Node
from scheduler.service.loop import Service


@pytest.fixture
def make_cluster() -> Iterator[Any]:
    """A stand-in cluster of a given fleet and settings, closed after the services stop."""
    made: list[DevCluster] = []

    def make(fleet: list[Node], **settings: Any) -> DevCluster:
        dc = DevCluster(fleet=fleet, load_delay_s=0.05).start()
        made.append(dc)
        put(dc, LAYOUT.settings, {**FAST_SETTINGS, **settings})
        return dc

    yield make
    for dc in made:
        dc.stop()


@pytest.fixture
def start_service(make_cluster: Any) -> Iterator[Any]:
    started: list[Service] = []

    def start(dc: DevCluster, **extra: Any) -> Service:
        svc = start_leader(dc, **extra)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


def _running(dc: DevCluster, model: str) -> list[dict[str, Any]]:
    """Live jobs of `model` whose allocations all run."""
    out = []
    for job in our_jobs(dc, model):
        allocs = [a for a in dc.nomad.allocations(job["ID"]) if a["DesiredStatus"] == "run"]
        if allocs and all(a["ClientStatus"] == "running" for a in allocs):
            out.append(job)
    return out


def _nodes_of(dc: DevCluster, job: dict[str, Any]) -> set[str]:
    return {
        a["NodeID"]
        for a in dc.nomad.allocations(job["ID"])
        if a["DesiredStatus"] == "run" and a["ClientStatus"] != "complete"
    }


def _fleet(*nodes: tuple[str, int, str, str, str]) -> list[Node]:
    """(id, gpus, GPU model, datacenter, rack) each."""
    return [
        Node(
            id=nid,
            name=nid,
            address=f"10.0.0.{i + 1}",
            datacenter=dc,
            meta={"rack": rack} if rack else {},
            cpu_cores=64,
            memory_gb=512,
            gpus=[GPU(id=f"GPU-{nid}-{g}", model=model, memory_gb=80) for g in range(n)],
        )
        for i, (nid, n, model, dc, rack) in enumerate(nodes)
    ]


def test_changing_the_image_rolls_replicas_make_before_break(
    cluster: DevCluster, start_service: Any
) -> None:
    """Two replicas on image v1; the operator changes the image: each replica is replaced by
    one on the new image (new job, new spec digest in Meta), one at a time, and an old one is
    stopped only once its replacement runs. Live never drops below the desired count."""
    _rolls_one_at_a_time(cluster, start_service)


def test_a_slow_stop_still_rolls_one_at_a_time(start_service: Any) -> None:
    """The pass that stops a covered replica starts the next replacement: that start waits
    for the stop, however slow Nomad's deregister is, so no more than the desired count and
    the surge of the model's jobs are ever live."""
    faults = Faults(seed=3)
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, faults=faults) as dc:
        dc.consul.kv_put(LAYOUT.settings, json.dumps(FAST_SETTINGS))
        faults.set("/v1/job/", latency_s=0.4)  # deregister (and job reads), not register
        _rolls_one_at_a_time(dc, start_service)


def _rolls_one_at_a_time(cluster: DevCluster, start_service: Any) -> None:
    start_service(cluster)
    key = LAYOUT.model_key("qwen-2b")
    serve = {"source": "org/some-model", "runtime": "vllm", "image": "vllm/vllm-openai:v0.9.0"}
    value = model_value([{"name": "tp2", "gpus": 2}], serve=serve, scaling={"min": 2, "max": 2})
    put(cluster, key, value)
    old = wait_for(lambda: len(_running(cluster, "qwen-2b")) == 2 and _running(cluster, "qwen-2b"))
    wait_for(lambda: (status(cluster, "qwen-2b") or {}).get("live") == 2, what="both ready")
    old_ids = {j["ID"] for j in old}
    old_spec = {j["Meta"][SPEC_META] for j in old}
    assert len(old_spec) == 1
    new_image = "vllm/vllm-openai:v0.10.0"
    put(cluster, key, {**value, "serve": {**serve, "image": new_image}})
    seen_live: list[int] = []
    seen_jobs: list[int] = []

    progress: set[str] = set()

    def rolled() -> bool:
        progress.add(str((status(cluster, "qwen-2b") or {}).get("rollout")))
        seen_jobs.append(len(our_jobs(cluster, "qwen-2b")))
        running = _running(cluster, "qwen-2b")
        seen_live.append(len(running))
        return len(running) == 2 and not ({j["ID"] for j in running} & old_ids)

    wait_for(rolled, timeout=30, what="both replicas on the new image")
    new = _running(cluster, "qwen-2b")
    assert {j["Meta"][SPEC_META] for j in new} != old_spec
    assert all(j["TaskGroups"][0]["Tasks"][0]["Config"]["image"] == new_image for j in new)
    assert min(seen_live) >= 2  # make-before-break: never fewer than 2 running
    assert any(p.startswith("rolling update: ") for p in progress)  # status showed it
    # One at a time: at no moment were more than 3 jobs live (2 desired + surge 1).
    assert max(seen_jobs) == 3
    wait_for(lambda: (status(cluster, "qwen-2b") or {}).get("rollout") is None, what="done")


def test_a_refused_replacement_stops_the_roll_out_and_keeps_the_old_replica(
    cluster: DevCluster, start_service: Any
) -> None:
    """The replacement lands where Nomad refuses it (another namespace holds h2's GPUs, hidden
    from the scheduler's token): the roll-out stops, the old replica keeps serving, status says
    so, and the failure is kept in the scheduler's state key across passes."""
    cluster.nomad.set_node_eligibility("node-h2", False)
    start_service(cluster, nomad_token=SCHEDULER_TOKEN)
    key = LAYOUT.model_key("qwen-4b")
    value = model_value([{"name": "tp4", "gpus": 4}], scaling={"min": 1, "max": 1})
    hide_namespace_from_scheduler(cluster)
    put(cluster, key, value)
    [old] = wait_for(lambda: _running(cluster, "qwen-4b"), what="a replica on h1")
    assert _nodes_of(cluster, old) == {"node-h1"}
    cluster.nomad.cluster.register(
        foreign_job("train", "research", "node-h2", [f"GPU-h2-{i}" for i in range(4)])
    )
    cluster.nomad.set_node_eligibility("node-h2", True)
    put(cluster, key, {**value, "serve": {**value["serve"], "image": "vllm/vllm-openai:v9"}})

    def stopped() -> str:
        return str((status(cluster, "qwen-4b") or {}).get("rollout") or "")

    wait_for(lambda: "roll-out stopped" in stopped(), what="the roll-out to stop")
    state = json.loads(cluster.consul.kv_get(LAYOUT.holds) or "{}")
    assert state["stalled"]["qwen-4b"]
    assert [j["ID"] for j in _running(cluster, "qwen-4b")] == [old["ID"]]
    assert "roll-out stopped" in stopped()


def test_a_model_on_its_second_profile_moves_back_to_the_first(
    make_cluster: Any, start_service: Any
) -> None:
    """The H100 node is full of another model, so qwen runs on its A100 profile; once the
    H100s free up it moves back, make-before-break, and stays there."""
    fleet = _fleet(("node-h", 2, H100, "dc1", ""), ("node-a", 2, A100, "dc1", ""))
    dc = make_cluster(fleet)
    start_service(dc)
    filler = model_value(
        [{"name": "h2", "gpus": 2, "gpu_models": ["H100"]}], scaling={"min": 1, "max": 1}
    )
    put(dc, LAYOUT.model_key("filler"), filler)
    wait_for(lambda: _running(dc, "filler"), what="the filler on the H100s")
    profiles = [
        {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
        {"name": "a100", "gpus": 1, "gpu_models": ["A100"]},
    ]
    put(dc, LAYOUT.model_key("qwen"), model_value(profiles, scaling={"min": 1, "max": 1}))
    [first] = wait_for(lambda: _running(dc, "qwen"), what="qwen on the A100 profile")
    assert first["Meta"]["llm_scheduler_profile"] == "a100"
    wait_for(lambda: (status(dc, "qwen") or {}).get("live") == 1, what="qwen ready")
    put(dc, LAYOUT.model_key("filler"), {**filler, "scaling": {"min": 0, "max": 0}})

    def moved() -> list[dict[str, Any]]:
        running = _running(dc, "qwen")
        ok = [j["Meta"]["llm_scheduler_profile"] for j in running] == ["h100"]
        return running if ok else []

    [back] = wait_for(moved, timeout=30, what="qwen back on the H100 profile")
    assert _nodes_of(dc, back) == {"node-h"}
    jobs = our_jobs(dc, "qwen", live_only=False)
    assert len(jobs) <= 2  # one move, no churn (the moved-from job may be purged already)


def test_a_multi_node_replica_stays_in_one_datacenter_and_rack(
    make_cluster: Any, start_service: Any
) -> None:
    """The roomiest nodes are in different datacenters and racks; the 2x4 replica goes to the
    two nodes of one rack of one datacenter instead."""
    fleet = _fleet(
        ("node-a", 8, H100, "dc1", "r1"),
        ("node-b", 8, H100, "dc2", "r1"),
        ("node-c", 4, H100, "dc2", "r2"),
        ("node-d", 4, H100, "dc2", "r2"),
    )
    dc = make_cluster(fleet)
    start_service(dc)
    value = model_value([{"name": "2x4", "gpus": 4, "shards": 2}], scaling={"min": 1})
    put(dc, LAYOUT.model_key("big"), value)
    [job] = wait_for(lambda: _running(dc, "big"), what="the 2x4 replica")
    assert _nodes_of(dc, job) == {"node-c", "node-d"}


def test_cheapest_placement_uses_the_cheaper_gpu_type(
    make_cluster: Any, start_service: Any
) -> None:
    fleet = _fleet(("node-h", 2, H100, "dc1", ""), ("node-a", 2, A100, "dc1", ""))
    dc = make_cluster(fleet, gpu_costs={"H100": 4.0, "A100": 1.5})
    start_service(dc)
    profiles = [
        {"name": "h100", "gpus": 1, "gpu_models": ["H100"]},
        {"name": "a100x2", "gpus": 2, "gpu_models": ["A100"]},
    ]
    value = model_value(profiles, scaling={"min": 1, "max": 1}, placement="cheapest")
    put(dc, LAYOUT.model_key("qwen"), value)
    [job] = wait_for(lambda: _running(dc, "qwen"), what="qwen placed")
    assert job["Meta"]["llm_scheduler_profile"] == "a100x2"
    assert _nodes_of(dc, job) == {"node-a"}


def test_a_node_fragmented_by_small_replicas_is_freed_for_a_large_one(
    make_cluster: Any, start_service: Any
) -> None:
    """One 1-GPU replica on each 4-GPU node: a 4-GPU model fits nowhere. The scheduler moves
    a small replica (replacement first), and the large model then gets a node whole."""
    fleet = _fleet(
        ("node-1", 4, H100, "dc1", ""),
        ("node-2", 4, H100, "dc1", ""),
        ("node-3", 1, H100, "dc1", ""),
    )
    dc = make_cluster(fleet)
    for nid in ("node-2", "node-3"):
        dc.nomad.set_node_eligibility(nid, False)
    start_service(dc)
    small = model_value([{"name": "one", "gpus": 1}], scaling={"min": 1, "max": 2})
    put(dc, LAYOUT.model_key("small"), small)
    wait_for(lambda: len(_running(dc, "small")) == 1, what="a small replica on node-1")
    dc.nomad.set_node_eligibility("node-1", False)
    dc.nomad.set_node_eligibility("node-2", True)
    put(dc, LAYOUT.model_key("small"), {**small, "scaling": {"min": 2, "max": 2}})
    jobs = wait_for(lambda: len(_running(dc, "small")) == 2 and _running(dc, "small"))
    assert {n for j in jobs for n in _nodes_of(dc, j)} == {"node-1", "node-2"}
    dc.nomad.set_node_eligibility("node-1", True)
    dc.nomad.set_node_eligibility("node-3", True)
    big = model_value([{"name": "tp4", "gpus": 4}], scaling={"min": 1, "max": 1})
    put(dc, LAYOUT.model_key("big"), big)
    [job] = wait_for(lambda: _running(dc, "big"), timeout=30, what="the large replica")
    assert len(_nodes_of(dc, job)) == 1
    smalls = wait_for(lambda: len(_running(dc, "small")) == 2 and _running(dc, "small"))
    assert not ({n for j in smalls for n in _nodes_of(dc, j)} & _nodes_of(dc, job))
