"""The adapters intern what the pass looks up (scheduler/adapters/interning.py): in a snapshot
built from the stand-ins' JSON, a shard's node id and device ids are the node's and the GPUs'
own string objects, a replica's model name is its catalog model's, and a GPU model's name or
an owner is one object however many nodes or models carry it (bench/snapshot_layout.py
measures what that is worth). Over the loopback stand-ins, through the real clients."""

from __future__ import annotations

from e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    service_config,
    small_fleet,
    status,
    wait_for,
)

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.service.loop import Service


def _running(dc: DevCluster, model: str) -> bool:
    replicas = (status(dc, model) or {}).get("replicas", [])
    return bool(replicas) and all(r["state"] == "running" for r in replicas)


def test_a_built_snapshot_shares_its_ids_with_its_nodes_and_models() -> None:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05) as dc:
        put(dc, LAYOUT.settings, FAST_SETTINGS)
        put(dc, LAYOUT.model_key("whole"), model_value([{"name": "p", "gpus": 2}]))
        put(dc, LAYOUT.model_key("tiny"), model_value([{"name": "m", "mig_profile": "3g.40gb"}]))
        put(dc, LAYOUT.demand_key("whole"), {"inflight": 5})
        put(dc, LAYOUT.demand_key("tiny"), {"inflight": 5})
        svc = Service(service_config(dc, pass_interval_s=0.2))
        svc.run_in_thread()
        try:
            wait_for(lambda: _running(dc, "whole") and _running(dc, "tiny"), what="both running")
            snap = svc.builder.build(svc.clock()).snapshot
        finally:
            svc.stop()
    nodes = {n.id: n.id for n in snap.nodes}
    devices = {g.id: g.id for n in snap.nodes for g in n.gpus}
    devices |= {s.id: s.id for n in snap.nodes for g in n.gpus for s in g.mig or ()}
    names = {m.name: m.name for m in snap.models}
    shards = [sh for r in snap.replicas for sh in r.shards]
    assert {r.model for r in snap.replicas} == {"whole", "tiny"}
    held = [d for sh in shards for d in sh.gpus]
    assert len(held) >= 3 and any(d.startswith("MIG-") for d in held)  # whole GPUs and a slice
    # Equal is not enough: the same objects, so the pass's lookups match on identity.
    assert all(sh.node is nodes[sh.node] for sh in shards)
    assert all(d is devices[d] for d in held)
    assert all(r.model is names[r.model] for r in snap.replicas)
    # Read from other documents (two nodes, two models): still one object each.
    h1, h2 = (n for n in snap.nodes if n.id in ("node-h1", "node-h2"))
    assert h1.gpus[0].model is h2.gpus[0].model and h1.datacenter is h2.datacenter
    whole, tiny = sorted(snap.models, key=lambda m: m.name, reverse=True)
    assert whole.owner is tiny.owner
