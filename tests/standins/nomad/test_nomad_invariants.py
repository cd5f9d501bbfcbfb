"""Property: whatever jobs come and go, the cluster never hands one device to two allocations
and never overcommits a node; a job is short of allocations only with a blocked evaluation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nomad_helpers import gpu_job

from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.nomad.alloc_status import is_terminal
from llm_scheduler_standins.nomad.state import Cluster

FLEET = builtin_fleet()[:2] + builtin_fleet()[-1:]  # two H100 nodes and the MIG node
DEVICES = ["nvidia/gpu", "nvidia/gpu/NVIDIA A100-SXM4-80GB MIG 1g.10gb", "gpu"]

register = st.tuples(
    st.just("register"),
    st.integers(0, 5),  # job number
    st.integers(1, 5),  # device count
    st.sampled_from(DEVICES),
    st.sampled_from([None, *[n.id for n in FLEET]]),
    st.integers(1, 3),  # group count
)
deregister = st.tuples(st.just("deregister"), st.integers(0, 5))


def _check(cluster: Cluster) -> None:
    live = [a for a in cluster.allocs() if not is_terminal(a)]
    seen: set[str] = set()
    memory: dict[str, int] = {}
    for alloc in live:
        for task in alloc["AllocatedResources"]["Tasks"].values():
            ids = [i for d in task["Devices"] or [] for i in d["DeviceIDs"]]
            assert not seen & set(ids), "a device is held twice"
            seen |= set(ids)
            memory[alloc["NodeID"]] = memory.get(alloc["NodeID"], 0) + task["Memory"]["MemoryMB"]
    for node in FLEET:
        assert memory.get(node.id, 0) <= node.memory_gb * 1024
    for job in cluster.jobs():
        if job["Stop"]:
            continue
        want = sum(g["Count"] for g in job["TaskGroups"])
        have = sum(1 for a in live if a["JobID"] == job["ID"])
        blocked = [e for e in cluster.evaluations(job_id=job["ID"]) if e["Status"] == "blocked"]
        assert have == want or blocked, f"{job['ID']}: {have} of {want} and nothing blocked"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(register, deregister), min_size=1, max_size=12))
def test_devices_are_never_shared(ops: list[tuple]) -> None:
    cluster = Cluster(FLEET, registry=None, load_delay_s=60, region="global", seed=3)
    try:
        for op in ops:
            if op[0] == "register":
                _, n, count, device, node_id, groups = op
                body = gpu_job(
                    f"j{n}",
                    node_id=node_id,
                    count=count,
                    device=device,
                    group_count=groups,
                    memory_mb=200 * 1024,
                )
                cluster.register(body["Job"])
            else:
                cluster.deregister("default", f"j{op[1]}", purge=False)
            _check(cluster)
    finally:
        cluster.close()


# Nomad keeps a job's summary in its own table, updated on every allocation and evaluation
# write (nomad/state/state_store.go: updateSummaryWithAlloc moves an allocation between the
# Starting/Running/Complete/Failed/Lost bins as its ClientStatus changes; nestedUpsertEval sets
# Queued from the evaluation's QueuedAllocations). The stand-in reads it through per-job
# indexes; whatever happens, it must say what a recount over every allocation and evaluation
# says.
_BINS = {
    "pending": "Starting",
    "running": "Running",
    "complete": "Complete",
    "failed": "Failed",
    "lost": "Lost",
}
alloc_op = st.tuples(st.sampled_from(["fail", "stop"]), st.integers(0, 30))
node_op = st.tuples(st.sampled_from(["down", "up"]), st.integers(0, len(FLEET) - 1))
purge = st.tuples(st.just("purge"), st.integers(0, 5))


def _recount(cluster: Cluster, job: dict) -> dict:
    groups = {
        g["Name"]: dict.fromkeys(
            ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown"), 0
        )
        for g in job["TaskGroups"]
    }
    for alloc in cluster.allocs(namespace=job["Namespace"]):
        if alloc["JobID"] == job["ID"]:
            bins = groups.setdefault(alloc["TaskGroup"], dict.fromkeys(groups["shard-0"], 0))
            bins[_BINS.get(alloc["ClientStatus"], "Unknown")] += 1
    for evaluation in cluster.evaluations(namespace=job["Namespace"], job_id=job["ID"]):
        if evaluation["Status"] == "blocked":
            for group, queued in (evaluation["QueuedAllocations"] or {}).items():
                groups[group]["Queued"] = queued
    return groups


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(register, deregister, purge, alloc_op, node_op), min_size=1, max_size=16))
def test_summaries_and_listings_follow_every_change(ops: list[tuple]) -> None:
    cluster = Cluster(FLEET, registry=None, load_delay_s=60, region="global", seed=5)
    try:
        for op in ops:
            kind = op[0]
            if kind == "register":
                _, n, count, device, node_id, groups = op
                body = gpu_job(
                    f"j{n}", node_id=node_id, count=count, device=device, group_count=groups
                )
                cluster.register(body["Job"])
            elif kind in ("deregister", "purge"):
                cluster.deregister("default", f"j{op[1]}", purge=kind == "purge")
            elif kind in ("fail", "stop"):
                allocs = cluster.allocs()
                if allocs:
                    alloc_id = allocs[op[1] % len(allocs)]["ID"]
                    if kind == "fail":
                        cluster.fail_allocation(alloc_id)
                    else:
                        cluster.stop_allocation(alloc_id)
            else:
                cluster.set_node_status(FLEET[op[1]].id, "down" if kind == "down" else "ready")
            _check(cluster)
            jobs = cluster.jobs()
            stubs = {s["ID"]: s for s in cluster.job_stubs(meta=True)}
            assert sorted(stubs) == sorted(j["ID"] for j in jobs)
            for job in jobs:
                want = _recount(cluster, job)
                assert stubs[job["ID"]]["JobSummary"]["Summary"] == want, job["ID"]
                assert stubs[job["ID"]]["Meta"] == job["Meta"]
                assert cluster.job_summary("default", job["ID"])["Summary"] == want
                listed = cluster.alloc_stubs(namespace="default", job_id=job["ID"])
                everyone = [a for a in cluster.allocs() if a["JobID"] == job["ID"]]
                assert [a["ID"] for a in listed] == [a["ID"] for a in everyone]
    finally:
        cluster.close()
