"""Host volumes: nodes advertise them (Node.HostVolumes), a job that asks for one its node lacks
stays unplaced with Nomad's reason, and `volume`/`volume_mount` blocks parse as Nomad's do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from nomad_helpers import gpu_job, wait_for

import nomad
from llm_scheduler_standins.fleet import builtin_fleet, parse_fleet
from llm_scheduler_standins.fleet_model import HostVolume, Node
from llm_scheduler_standins.nomad import NomadStandin
from llm_scheduler_standins.nomad.placement import MISSING_HOST_VOLUMES

CACHE = "llm-model-cache"


def _fleet() -> list[Node]:
    """gpu-h100-1 has a writable cache volume, gpu-h100-2 a read-only one, the rest none."""
    nodes = builtin_fleet()
    volumes = {
        "gpu-h100-1": HostVolume(path="/srv/hf"),
        "gpu-h100-2": HostVolume(path="/srv/hf-ro", read_only=True),
    }
    return [
        n.model_copy(update={"host_volumes": {CACHE: volumes[n.name]}}) if n.name in volumes else n
        for n in nodes
    ]


@pytest.fixture(scope="module")
def volume_fleet() -> list[Node]:
    return _fleet()


@pytest.fixture
def vstandin(volume_fleet: list[Node]) -> Iterator[NomadStandin]:
    server = NomadStandin(volume_fleet, load_delay_s=0.02, seed=3)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def vclient(vstandin: NomadStandin) -> nomad.Nomad:
    assert vstandin._server is not None
    return nomad.Nomad(host="127.0.0.1", port=vstandin._server.port, timeout=10)


def _node(fleet: list[Node], name: str) -> Node:
    return next(n for n in fleet if n.name == name)


def _with_volume(job_id: str, node_id: str, *, read_only: bool = False) -> dict[str, Any]:
    body = gpu_job(job_id, node_id=node_id)
    group = body["Job"]["TaskGroups"][0]
    group["Volumes"] = {
        "cache": {"Name": "cache", "Type": "host", "Source": CACHE, "ReadOnly": read_only}
    }
    group["Tasks"][0]["VolumeMounts"] = [{"Volume": "cache", "Destination": "/hf"}]
    return body


def test_nodes_advertise_their_host_volumes(vclient: nomad.Nomad, volume_fleet: list[Node]) -> None:
    with_volume = vclient.node.get_node(_node(volume_fleet, "gpu-h100-1").id)
    assert with_volume["HostVolumes"] == {
        CACHE: {"Name": CACHE, "Path": "/srv/hf", "ReadOnly": False, "ID": ""}
    }
    assert vclient.node.get_node(_node(volume_fleet, "gpu-a100-1").id)["HostVolumes"] is None


def test_a_node_without_the_volume_leaves_the_job_unplaced(
    vclient: nomad.Nomad, volume_fleet: list[Node]
) -> None:
    node = _node(volume_fleet, "gpu-a100-1")
    answer = vclient.jobs.register_job(_with_volume("llm-cold-r1", node.id))
    evaluation = vclient.evaluation.get_evaluation(answer["EvalID"])
    failed = evaluation["FailedTGAllocs"]["shard-0"]
    assert failed["ConstraintFiltered"][MISSING_HOST_VOLUMES] == 1
    assert MISSING_HOST_VOLUMES == "missing compatible host volumes"
    assert [
        a for a in vclient.job.get_allocations("llm-cold-r1") if a["DesiredStatus"] == "run"
    ] == []


def test_a_node_with_the_volume_places_and_runs(
    vclient: nomad.Nomad, volume_fleet: list[Node]
) -> None:
    node = _node(volume_fleet, "gpu-h100-1")
    vclient.jobs.register_job(_with_volume("llm-warm-r1", node.id))

    def running() -> bool:
        allocs = vclient.job.get_allocations("llm-warm-r1")
        return bool(allocs) and allocs[0]["ClientStatus"] == "running"

    wait_for(running)
    (alloc,) = vclient.job.get_allocations("llm-warm-r1")
    assert alloc["NodeID"] == node.id


def test_a_read_only_volume_refuses_a_writer_and_takes_a_reader(
    vclient: nomad.Nomad, volume_fleet: list[Node]
) -> None:
    node = _node(volume_fleet, "gpu-h100-2")
    answer = vclient.jobs.register_job(_with_volume("llm-rw-r1", node.id))
    failed = vclient.evaluation.get_evaluation(answer["EvalID"])["FailedTGAllocs"]["shard-0"]
    assert failed["ConstraintFiltered"][MISSING_HOST_VOLUMES] == 1
    answer = vclient.jobs.register_job(_with_volume("llm-ro-r1", node.id, read_only=True))
    assert not vclient.evaluation.get_evaluation(answer["EvalID"]).get("FailedTGAllocs")


def test_volume_blocks_parse_as_nomad_does(vstandin: NomadStandin) -> None:
    hcl = """
job "x" {
  group "g" {
    volume "cache" {
      type      = "host"
      source    = "llm-model-cache"
      read_only = false
    }
    task "t" {
      driver = "docker"
      volume_mount {
        volume      = "cache"
        destination = "/root/.cache/huggingface"
      }
    }
  }
}
"""
    assert vstandin._server is not None
    answer = httpx.post(
        f"{vstandin._server.url}/v1/jobs/parse", json={"JobHCL": hcl, "Canonicalize": True}
    )
    group = answer.json()["TaskGroups"][0]
    assert group["Volumes"]["cache"] == {
        "Name": "cache",
        "Type": "host",
        "Source": "llm-model-cache",
        "ReadOnly": False,
        "Sticky": False,
        "AccessMode": "",
        "AttachmentMode": "",
        "MountOptions": None,
        "PerAlloc": False,
    }
    assert group["Tasks"][0]["VolumeMounts"] == [
        {
            "Volume": "cache",
            "Destination": "/root/.cache/huggingface",
            "ReadOnly": False,
            "PropagationMode": "private",
            "SELinuxLabel": "",
        }
    ]


def test_a_fleet_file_names_host_volumes_and_a_model_cache() -> None:
    (node,) = parse_fleet(
        [
            {
                "id": "n1",
                "name": "n1",
                "cpu_cores": 8,
                "memory_gb": 64,
                "host_volumes": {CACHE: {"path": "/srv/hf", "id": "a-uuid"}},
                "model_cache": {
                    "free_bytes": 10**12,
                    "weights": [{"source": "org/m", "bytes": 10**10}],
                },
            }
        ]
    )
    assert node.host_volumes[CACHE].id == "a-uuid"
    assert node.model_cache is not None and node.model_cache.weights[0].source == "org/m"
