"""Batch jobs run as Nomad runs them (the prefetch jobs): the rendered prefetch job passes the
stand-in's /v1/jobs/parse, its allocation completes once its download is done (the node's
stand-in cache then holds the weights) or fails, the job is `dead`, and an evaluation places
nothing again for a completed allocation nor for a failed one past its reschedule policy."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from nomad_helpers import wait_for

import nomad
from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.fleet_model import HostVolume, ModelCache, Node
from llm_scheduler_standins.model_cache import GB, WeightsTiming
from llm_scheduler_standins.nomad import NomadStandin
from scheduler.adapters.job_maker import JobMaker
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.core.models import Model

CACHE = "llm-model-cache"
TIMING = WeightsTiming(download_gbps=20.0, load_gbps=10.0, default_bytes=GB)


def _fleet(free: int) -> list[Node]:
    first = builtin_fleet()[0]
    update = {"host_volumes": {CACHE: HostVolume(path="/srv/hf")}}
    return [first.model_copy(update={**update, "model_cache": ModelCache(free_bytes=free)})]


@pytest.fixture(params=[100 * GB, GB // 2], ids=["room", "no-room"])
def standin(request: pytest.FixtureRequest) -> Iterator[NomadStandin]:
    server = NomadStandin(_fleet(request.param), load_delay_s=0.02, weights=TIMING)
    server.start()
    yield server
    server.stop()


def _model(**serve: Any) -> Model:
    return Model.model_validate(
        {
            "name": "m",
            "owner": "org/a",
            "profiles": [{"name": "p", "gpus": 1}],
            "serve": {"source": "org/m", "revision": "v1", "prefetch": 1, **serve},
        }
    )


def _prefetch_job(standin: NomadStandin, **group: Any) -> dict[str, Any]:
    assert standin._server is not None
    api = NomadAPI(standin._server.url)
    node = node_from_nomad(api.get(f"/v1/node/{standin.cluster.node_ids()[0]}"))
    maker = JobMaker(api, namespace=None, images={"vllm": "vllm/vllm-openai:v0.34.0"})
    job = maker.make_prefetch(_model(), node, datetime(2026, 12, 5, tzinfo=UTC))
    job["TaskGroups"][0].update(group)
    return job


def _allocs(client: nomad.Nomad, job_id: str) -> list[str]:
    return [a["ClientStatus"] for a in client.job.get_allocations(job_id)]


def test_a_batch_job_completes_or_fails_once_and_is_dead(standin: NomadStandin) -> None:
    assert standin._server is not None
    client = nomad.Nomad(host="127.0.0.1", port=standin._server.port, timeout=10)
    job = _prefetch_job(standin)
    (task,) = job["TaskGroups"][0]["Tasks"]
    assert task["Config"]["entrypoint"] == ["hf"]
    assert task["Config"]["args"] == [
        "download",
        "org/m",
        "--revision",
        "v1",
        "--exclude",
        "original/*",
    ]
    client.jobs.register_job({"Job": job})
    wait_for(lambda: client.job.get_job(job["ID"])["Status"] == "dead")
    node_id = standin.cluster.node_ids()[0]
    cache = standin.cluster.caches.cache(node_id) if standin.cluster.caches else None
    assert cache is not None
    held = [w.source for w in cache.weights]
    expected = ["complete"] if held == ["org/m"] else ["failed"]
    assert cache.free_bytes >= 0 and _allocs(client, job["ID"]) == expected
    client.jobs.register_job({"Job": job})  # the same version again: an evaluation only
    assert _allocs(client, job["ID"]) == expected
    assert client.job.get_job(job["ID"])["Status"] == "dead"


@pytest.mark.parametrize("standin", [GB // 2], indirect=True, ids=["no-room"])
def test_a_failed_batch_allocation_is_placed_again_within_its_reschedule_policy(
    standin: NomadStandin,
) -> None:
    assert standin._server is not None
    client = nomad.Nomad(host="127.0.0.1", port=standin._server.port, timeout=10)
    job = _prefetch_job(standin, ReschedulePolicy={"Attempts": 1, "Unlimited": False})
    client.jobs.register_job({"Job": job})
    wait_for(lambda: client.job.get_job(job["ID"])["Status"] == "dead")
    client.jobs.register_job({"Job": job})  # one attempt left: placed again
    wait_for(lambda: _allocs(client, job["ID"]) == ["failed", "failed"])
    wait_for(lambda: client.job.get_job(job["ID"])["Status"] == "dead")
    client.jobs.register_job({"Job": job})  # none left
    assert _allocs(client, job["ID"]) == ["failed", "failed"]
