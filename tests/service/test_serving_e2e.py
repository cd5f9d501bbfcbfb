"""What the service registers, end to end on the stand-ins over HTTP: shipped templates parsed
by Nomad's /v1/jobs/parse, a legal service name for a dotted model, a two-node replica ready
when its head passes its check, bad serve input reported by key and field while others go on."""

from __future__ import annotations

import pytest
from e2e_helpers import LAYOUT, model_value, our_jobs, put, status, wait_for

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.adapters.nomad_jobs import service_name
from scheduler.service.loop import Service


@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
def test_a_two_node_replica_of_a_dotted_model_runs_and_is_ready_by_its_head(
    cluster: DevCluster, service: Service, runtime: str
) -> None:
    name = "qwen2.5-7b"
    serve = {"source": "Qwen/Qwen2.5-7B-Instruct", "runtime": runtime}
    put(cluster, LAYOUT.model_key(name), model_value([{"name": "pp2", "gpus": 2, "shards": 2}],
                                                     serve=serve))  # fmt: skip
    put(cluster, LAYOUT.demand_key(name), {"inflight": 1})
    [job] = wait_for(lambda: our_jobs(cluster, name), what="a two-node job")
    head, other = job["TaskGroups"]
    svc = service_name(name)
    assert svc != f"llm-{name}" and head["Tasks"][0]["Services"][0]["Name"] == svc
    assert not other["Tasks"][0].get("Services")
    args = [g["Tasks"][0]["Config"]["args"] for g in (head, other)]
    assert args[0][args[0].index("--node-rank") + 1] == "0"
    assert args[1][args[1].index("--node-rank") + 1] == "1"
    st = wait_for(
        lambda: (
            (s := status(cluster, name))
            and s["replicas"]
            and s["replicas"][0]["state"] == "running"
            and s
        ),
        timeout=30,
        what="the replica running (its head's check passing)",
    )
    assert len(st["replicas"][0]["nodes"]) == 2


def test_bad_serve_input_is_a_status_error_by_key_and_field_and_others_go_on(
    cluster: DevCluster, service: Service
) -> None:
    bad = model_value(
        [{"name": "p", "gpus": 1}], serve={"source": "org/m", "extra_args": {"--hf-model": "x"}}
    )
    put(cluster, LAYOUT.model_key("odd"), bad)
    put(cluster, LAYOUT.demand_key("odd"), {"inflight": 1})
    put(cluster, LAYOUT.model_key("fine"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("fine"), {"inflight": 1})
    st = wait_for(lambda: status(cluster, "odd"), what="status of the bad model")
    assert st["last_error"] == (
        "llm-scheduler/models/odd: serve.extra_args.--hf-model: not a flag of vllm "
        "(see scheduler/data/runtimes/)"
    )
    wait_for(lambda: our_jobs(cluster, "fine"), what="the good model still starts")
    assert our_jobs(cluster, "odd") == []
