"""The replicas' model cache: the templates mount the `model-cache` host volume at the runtimes'
Hugging Face cache with HF_HOME set to it, and a shard asks for the volume only on a node that
advertises it (elsewhere Nomad would leave the replica unplaced: the node is simply cold)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from serving_helpers import NOW, SHAPES, model, nodes, shipped_template

from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.fleet_model import HostVolume
from llm_scheduler_standins.nomad import NomadStandin
from llm_scheduler_standins.nomad.hcl import parse_job
from scheduler.adapters.job_maker import JobMaker
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.nomad_jobs import build_job, template_variables
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.core.models import Node, Shard, StartAction

HF = "/root/.cache/huggingface"
VOLUME = "llm-model-cache"


def _job(runtime: str, shape: str, fleet: dict[str, Node], volume: str = VOLUME) -> dict[str, Any]:
    m = model(runtime, shape)
    template = parse_job(
        shipped_template(runtime), variables=template_variables(m, "img"), canonicalize=True
    )
    action = StartAction(
        model=m.name, profile=m.profiles[0].name, replica="r-1", shards=SHAPES[shape][1], reason="t"
    )
    return build_job(copy.deepcopy(template), m, action, fleet, NOW, "llm", cache_volume=volume)


def _with_volumes(*names: str, volumes: tuple[str, ...] = (VOLUME,)) -> dict[str, Node]:
    fleet = nodes()
    for name in names:
        fleet[name] = fleet[name].model_copy(update={"host_volumes": list(volumes)})
    return fleet


@pytest.mark.parametrize("runtime", ["vllm", "sglang"])
def test_a_node_with_the_volume_mounts_it_as_the_hf_cache(runtime: str) -> None:
    (group,) = _job(runtime, "tp4", _with_volumes("n1"))["TaskGroups"]
    assert (
        group["Volumes"]["model-cache"] | {"Type": "host", "Source": VOLUME}
        == (group["Volumes"]["model-cache"])
    )
    assert not group["Volumes"]["model-cache"]["ReadOnly"]
    (task,) = group["Tasks"]
    assert [(m["Volume"], m["Destination"], m["ReadOnly"]) for m in task["VolumeMounts"]] == [
        ("model-cache", HF, False)
    ]
    assert task["Env"]["HF_HOME"] == HF


def test_a_node_without_it_asks_for_nothing_and_stays_placeable() -> None:
    (group,) = _job("vllm", "tp4", _with_volumes())["TaskGroups"]
    assert group["Volumes"] is None and group["Tasks"][0]["VolumeMounts"] is None
    assert group["Tasks"][0]["Env"]["HF_HOME"] == HF  # the container's own scratch space


def test_each_shard_asks_only_where_its_node_has_it() -> None:
    head, other = _job("vllm", "2-node", _with_volumes("n2"))["TaskGroups"]
    assert head["Volumes"] is None and other["Volumes"]["model-cache"]["Source"] == VOLUME


def test_the_setting_names_the_volume() -> None:
    fleet = _with_volumes("n1", volumes=("nvme-cache",))
    (group,) = _job("vllm", "tp4", fleet, volume="nvme-cache")["TaskGroups"]
    assert group["Volumes"]["model-cache"]["Source"] == "nvme-cache"
    (group,) = _job("vllm", "tp4", fleet)["TaskGroups"]  # the default name: not on n1
    assert group["Volumes"] is None


@pytest.fixture
def standin() -> Iterator[NomadStandin]:
    fleet = builtin_fleet()
    first = fleet[0].model_copy(update={"host_volumes": {VOLUME: HostVolume(path="/srv/hf")}})
    server = NomadStandin([first, fleet[1]], load_delay_s=0.0, seed=1)
    server.start()
    yield server
    server.stop()


def test_end_to_end_both_nodes_run_their_replica(standin: NomadStandin) -> None:
    assert standin._server is not None
    api = NomadAPI(standin._server.url)
    maker = JobMaker(api, namespace=None, images={"vllm": "vllm/vllm-openai:test"})
    listed = [node_from_nomad(api.get(f"/v1/node/{n['ID']}")) for n in api.get("/v1/nodes")]
    fleet = {n.id: n for n in listed}
    m = model("vllm", "one-gpu")
    for i, node in enumerate(listed):
        gpu = node.gpus[0].id
        shards = [Shard(node=node.id, gpus=[gpu])]
        action = StartAction(
            model=m.name, profile="one-gpu", replica=f"r-{i}", shards=shards, reason="t"
        )
        job = maker.make(m, action, fleet, NOW)
        answer = api.register(job)
        evaluation = api.get(f"/v1/evaluation/{answer['EvalID']}")
        assert not evaluation.get("FailedTGAllocs"), (node.name, evaluation)
        mounted = job["TaskGroups"][0]["Volumes"]
        assert (mounted is not None) == (VOLUME in node.host_volumes)
    assert sum(VOLUME in n.host_volumes for n in listed) == 1
