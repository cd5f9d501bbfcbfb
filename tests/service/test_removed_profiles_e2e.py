"""A profile removed from its model while a replica of it runs, end to end over the stand-ins:
with no room for the model's current profile, the status names the old replica and until when
it stays; the state key dates the removal; the replica goes once the retire grace has passed,
and the current profile then starts in its room."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import FAST_SETTINGS, LAYOUT, model_value, our_jobs, put, status, wait_for

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.service.loop import Service


@pytest.mark.timeout(60)
def test_a_removed_profiles_replica_is_named_and_retired_after_the_grace(
    cluster: DevCluster, service: Service
) -> None:
    # One node of four GPUs may take work: the old replica holds all of it.
    cluster.nomad.set_node_eligibility("node-h2", False)
    cluster.nomad.set_node_eligibility("node-m1", False)
    put(cluster, LAYOUT.settings, {**FAST_SETTINGS, "retire_grace_s": 3})
    key, scaling = LAYOUT.model_key("llama"), {"min": 1, "max": 1}
    put(cluster, key, model_value([{"name": "p", "gpus": 4}], scaling=scaling))
    (old,) = wait_for(lambda: our_jobs(cluster, "llama"), what="a replica of profile p")
    put(cluster, key, model_value([{"name": "q", "gpus": 4}], scaling=scaling))
    pending = wait_for(
        lambda: (
            "removed profile p" in ((status(cluster, "llama") or {}).get("pending") or "")
            and status(cluster, "llama")["pending"]
        ),
        what="the old replica named in the status",
    )
    assert "removed profile p: 1 replica holds its room until current replicas run" in pending
    state = json.loads(cluster.consul.kv_get(LAYOUT.holds) or b"{}")
    assert "p" in state["gone"]["profiles"]["llama"]
    # After the grace it goes, and profile q starts in its room.
    (new,) = wait_for(
        lambda: [j for j in our_jobs(cluster, "llama") if j["ID"] != old["ID"]] or None,
        timeout=20,
        what="a replica of profile q",
    )
    wait_for(lambda: [j["ID"] for j in our_jobs(cluster, "llama")] == [new["ID"]], what="p gone")
