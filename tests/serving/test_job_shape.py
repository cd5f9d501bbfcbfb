"""The job shape real Nomad accepts and does not kill while a model loads.

Rules, from hashicorp/nomad @ aa026cc9 (nomad/structs):
- services.go Service.ValidateName: `^(?i:[a-z0-9]|[a-z0-9][a-z0-9\\-]{0,61}[a-z0-9])$`
  ("Service name must be valid per RFC 1123 ... no longer than 63 characters").
- structs.go Job.Validate: "Job ID contains a space" / "Job ID contains a null character".
- structs.go UpdateStrategy.IsEmpty is `MaxParallel == 0`; scheduler/reconciler/
  reconcile_cluster.go createDeployment returns nil for an empty strategy: no deployment, so no
  healthy_deadline (default 5m) or progress_deadline (10m) fails a replica that is loading.
- api/services.go: check_restart on a service applies to its checks; its grace counts from the
  task's start, so it must cover the model's load time.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from serving_helpers import (
    NOW,
    RUNTIME_FIXTURES,
    SHAPES,
    model,
    nodes,
    parse_job,
    render,
    shipped_template,
)

from scheduler.adapters.nomad_allocs import replica_from
from scheduler.adapters.nomad_jobs import (
    JobShapeError,
    build_job,
    job_id,
    owned_job,
    service_name,
    template_variables,
)
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.core.models import NAME_PATTERN, Shard, StartAction

NOMAD_SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])$")


def nomad_job_problems(job: dict[str, Any]) -> list[str]:
    """What Nomad's Job.Validate and Service.Validate would say about the parts we shape."""
    problems = []
    if " " in job["ID"] or "\0" in job["ID"]:
        problems.append(f"job id {job['ID']!r}")
    for group in job["TaskGroups"]:
        services = list(group.get("Services") or [])
        for task in group["Tasks"]:
            services += task.get("Services") or []
        problems += [
            f"service name {s['Name']!r}"
            for s in services
            if not NOMAD_SERVICE_NAME.match(s["Name"])
        ]
    return problems


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
def test_rendered_jobs_pass_nomads_name_rules(runtime: str, shape: str) -> None:
    job = render(runtime, shape)  # model "llama-3.1-8b": its plain service name is illegal
    assert nomad_job_problems(job) == []
    assert job["TaskGroups"][0]["Tasks"][0]["Services"][0]["Name"] == service_name("llama-3.1-8b")


@given(st.from_regex(NAME_PATTERN, fullmatch=True))
def test_every_legal_model_name_gives_a_legal_service_name_and_job_id(name: str) -> None:
    assert NOMAD_SERVICE_NAME.match(service_name(name)), service_name(name)
    jid = job_id(name, "r-0123456789")
    assert " " not in jid and "\0" not in jid


def test_service_names_are_collision_free() -> None:
    names = [
        "a.b", "a-b", "a_b", "qwen2_5-7b", "qwen2-5-7b", "llama-3.1-8b", "llama-3-1-8b",
        "x" * 64, "x" * 63 + "y", "m-h" + "0" * 8, "m",
    ]  # fmt: skip
    services = [service_name(n) for n in names]
    assert len(set(services)) == len(names), services
    assert service_name("a-b") == "llm-a-b"  # legal names stay readable
    assert service_name("a.b").startswith("llm-a-b-h")  # sanitised ones carry a hash
    # A plain name that looks like a hashed one is hashed too, so the two never meet.
    assert service_name("m-h" + "0" * 8) != "llm-m-h" + "0" * 8


@given(st.lists(st.from_regex(NAME_PATTERN, fullmatch=True), min_size=2, max_size=6, unique=True))
def test_distinct_models_never_share_a_service(names: list[str]) -> None:
    assert len({service_name(n) for n in names}) == len(names)


@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
@pytest.mark.parametrize("load_grace_s", [1500, 2400])  # below and above the templates' 30m
def test_no_deployment_and_a_check_grace_that_is_the_load_grace(
    runtime: str, load_grace_s: int
) -> None:
    job = render(runtime, "tp4", load_grace_s=load_grace_s)
    for group in job["TaskGroups"]:
        assert group["Update"]["MaxParallel"] == 0  # UpdateStrategy.IsEmpty: no deployment
        service = group["Tasks"][0]["Services"][0]
        for holder in [service, *service["Checks"]]:
            assert holder["CheckRestart"]["Grace"] == load_grace_s * 10**9
        check = service["Checks"][0]
        assert check["Type"] == "http" and check["Path"] == "/health"
        if runtime == "sglang":
            # SGLang's /health waits up to 20 s for a 1-token generation.
            assert check["Timeout"] > 20 * 10**9


def test_node_pool_comes_from_the_chosen_node() -> None:
    assert render("vllm", "tp4")["NodePool"] == "gpu"
    assert render("vllm", "mig")["NodePool"] == "default"


def test_shards_in_two_pools_cannot_be_one_job() -> None:
    m = model("vllm", "2-node")
    fleet = nodes()
    fleet["n2"] = fleet["n2"].model_copy(update={"pool": "other"})
    template = parse_job(
        shipped_template("vllm"), variables=template_variables(m, "img"), canonicalize=True
    )
    action = StartAction(
        model=m.name, profile="tp8x2", replica="r-1", shards=SHAPES["2-node"][1], reason=""
    )
    with pytest.raises(JobShapeError, match="node pools"):
        build_job(copy.deepcopy(template), m, action, fleet, NOW)


def test_a_multi_node_replica_is_ready_when_its_head_passes_its_check() -> None:
    job = owned_job(render("vllm", "2-node"))
    assert job is not None and job.checked_groups == {"shard-0"}
    allocs = [
        {"ID": f"a{i}", "TaskGroup": f"shard-{i}", "NodeID": n, "ClientStatus": "running",
         "DesiredStatus": "run", "ModifyTime": 1}
        for i, n in enumerate(["n1", "n2"])
    ]  # fmt: skip
    assert replica_from(job, allocs, {"a0"}, None).state == "running"  # type: ignore[union-attr]
    assert replica_from(job, allocs, {"a1"}, None).state == "starting"  # type: ignore[union-attr]
    pending = [allocs[0], {**allocs[1], "ClientStatus": "pending"}]
    assert replica_from(job, pending, {"a0"}, None).state == "starting"  # type: ignore[union-attr]


def test_job_meta_still_rebuilds_the_replica() -> None:
    job = render("sglang", "2-node")
    back = owned_job(job)
    assert back is not None
    assert back.model == "llama-3.1-8b" and back.replica == "r-1a2b" and back.profile == "tp8x2"
    assert back.wish == [Shard(node=s.node, gpus=s.gpus) for s in SHAPES["2-node"][1]]


def test_a_node_knows_its_address_from_nomads_attribute() -> None:
    body = json.loads((RUNTIME_FIXTURES.parent / "nomad" / "node-read.json").read_text())
    assert node_from_nomad(body).address == body["Attributes"]["unique.network.ip-address"]
    body["Attributes"] = None  # a node that does not say: no address, not a crash
    assert node_from_nomad(body).address == ""
