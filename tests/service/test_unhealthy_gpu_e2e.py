"""A GPU the node's reporter marks unhealthy takes nothing new, end to end: the reporter's
record (fake NVML, real Consul session) reaches the scheduler through Consul KV, and the
Nomad jobs it registers avoid that GPU."""

from __future__ import annotations

import pytest
from e2e_helpers import (
    LAYOUT,
    model_value,
    our_jobs,
    put,
    service_config,
    small_fleet,
    status,
    wait_for,
)

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.commands.reporter import consul_client
from scheduler.reporter.fake_gpus import fleet_for_node
from scheduler.reporter.fake_nvml import FakeNvml
from scheduler.reporter.probe import NvmlProbe
from scheduler.reporter.writer import ReportWriter
from scheduler.service.loop import Service

XID_FALLEN_OFF_THE_BUS = 79


def _device_ids(dc: DevCluster, job_id: str) -> set[str]:
    ids: set[str] = set()
    for alloc in dc.nomad.allocations(job_id=job_id):
        for task in ((alloc.get("AllocatedResources") or {}).get("Tasks") or {}).values():
            for dev in task.get("Devices") or []:
                ids.update(dev.get("DeviceIDs") or [])
    return ids


def _used(dc: DevCluster) -> set[str]:
    ids: set[str] = set()
    for job in our_jobs(dc, "small"):
        ids |= _device_ids(dc, job["ID"])
    return ids


@pytest.mark.timeout(60)
def test_scheduler_avoids_a_gpu_the_reporter_marks_unhealthy(cluster: DevCluster) -> None:
    node = next(n for n in small_fleet() if n.id == "node-h1")
    bad_gpu = node.gpus[0].id
    # Only node-h1 may take new work, so the scheduler must choose among its four GPUs.
    cluster.nomad.set_node_eligibility("node-h2", False)
    cluster.nomad.set_node_eligibility("node-m1", False)

    fake = FakeNvml(fleet_for_node(node))
    probe = NvmlProbe(node.id, nvml=fake)
    probe.open()
    fake.inject_xid(0, XID_FALLEN_OFF_THE_BUS)
    writer = ReportWriter(
        consul_client(cluster.consul_url),
        LAYOUT.node_gpus_key(node.id),
        ttl_s=30,
        session_name="gpu-reporter node-h1",
    )
    assert writer.publish(probe.read())

    svc = Service(service_config(cluster))
    svc.run_in_thread()
    try:
        wait_for(lambda: svc.leader.is_leader, what="leadership")
        put(
            cluster,
            LAYOUT.model_key("small"),
            model_value(
                [{"name": "one", "gpus": 1}], scaling={"min": 0, "max": 4, "target_per_replica": 10}
            ),
        )
        put(cluster, LAYOUT.demand_key("small"), {"inflight": 40, "queued": 0})
        wait_for(lambda: len(_used(cluster)) == 3, what="three GPUs allocated")
        used = _used(cluster)
        assert bad_gpu not in used
        assert used == {g.id for g in node.gpus[1:]}
        record = wait_for(lambda: (status(cluster, "small") or {}).get("pending"), what="pending")
        assert "one" in record  # the sentence names the profile that was short
    finally:
        svc.stop()
        writer.close()


@pytest.mark.timeout(60)
def test_a_replica_whose_gpu_turns_unhealthy_is_replaced_make_before_break(
    cluster: DevCluster,
) -> None:
    node = next(n for n in small_fleet() if n.id == "node-h1")
    cluster.nomad.set_node_eligibility("node-h2", False)
    cluster.nomad.set_node_eligibility("node-m1", False)
    fake = FakeNvml(fleet_for_node(node))
    probe = NvmlProbe(node.id, nvml=fake)
    probe.open()
    writer = ReportWriter(
        consul_client(cluster.consul_url),
        LAYOUT.node_gpus_key(node.id),
        ttl_s=30,
        session_name="gpu-reporter node-h1",
    )
    assert writer.publish(probe.read())  # every GPU healthy

    svc = Service(service_config(cluster))
    svc.run_in_thread()
    try:
        wait_for(lambda: svc.leader.is_leader, what="leadership")
        put(
            cluster,
            LAYOUT.model_key("small"),
            model_value([{"name": "one", "gpus": 1}], scaling={"min": 1, "max": 1}),
        )
        (first,) = wait_for(lambda: _used(cluster) or None, what="a GPU allocated")
        # The reporter sees an XID on the replica's GPU; the scheduler reads it from KV.
        fake.inject_xid([g.id for g in node.gpus].index(first), XID_FALLEN_OFF_THE_BUS)
        assert writer.publish(probe.read())
        record = wait_for(
            lambda: (status(cluster, "small") or {}).get("rollout"), what="the reason in status"
        )
        assert record == f"replacing 1 replica on an unhealthy GPU ({first} on node-h1)"
        # Make before break: the replacement runs elsewhere, then the replica goes.
        (second,) = wait_for(lambda: _used(cluster) - {first} or None, what="a replacement")
        wait_for(lambda: _used(cluster) == {second}, what="the replica on the bad GPU stopped")
    finally:
        svc.stop()
        writer.close()
