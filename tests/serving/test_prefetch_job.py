"""The prefetch job's shape: the image's own downloader with flags `hf download` has, argv items
(no shell), the model's environment as its replicas get it, no GPU, the cache volume."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler.adapters.job_maker import template_text
from scheduler.adapters.nomad_jobs import JobShapeError
from scheduler.adapters.prefetch_jobs import (
    DOWNLOADER,
    build_prefetch_job,
    download_argv,
    prefetch_of,
)
from scheduler.core.models import Model, Node

FLAGS = {
    line.strip()
    for line in (Path(__file__).parent / "hf_download_flags.txt").read_text().splitlines()
    if line.startswith("--")
}
NODE = Node(id="n-1", name="gpu-1", cpu_cores=32, memory_gb=256, host_volumes=["llm-model-cache"])


def _model(**serve: Any) -> Model:
    return Model.model_validate(
        {
            "name": "m",
            "owner": "org/a",
            "profiles": [{"name": "p", "gpus": 1}],
            "serve": {"source": "org/m", **serve},
        }
    )


def _template() -> dict[str, Any]:
    """The shipped template as Nomad's parse gives it (enough of it for the shape)."""
    assert 'type = "batch"' in template_text("prefetch")[1]
    task = {"Name": "download", "Config": {"image": "x"}, "Env": {"HF_HOME": "/h"}, "Resources": {}}
    group = {"Name": "fetch", "Tasks": [task], "Volumes": {"model-cache": {"Source": "x"}}}
    return {"ID": "llm-prefetch", "Type": "batch", "Priority": 20, "TaskGroups": [group]}


@pytest.mark.parametrize("serve", [{}, {"revision": "v1.0"}, {"revision": "a" * 40}])
def test_the_downloader_is_hf_with_flags_it_has(serve: dict[str, Any]) -> None:
    argv = download_argv(_model(**serve))
    assert DOWNLOADER == "hf" and argv[:2] == ["download", "org/m"]
    assert {a for a in argv if a.startswith("--")} <= FLAGS
    assert ("--revision" in argv) == ("revision" in serve)


def test_the_job_is_pinned_has_no_gpu_and_gets_the_models_env() -> None:
    model = _model(env={"HF_TOKEN": "hf_x"})
    job = build_prefetch_job(_template(), model, NODE, datetime(2026, 12, 5, tzinfo=UTC))
    (group,) = job["TaskGroups"]
    (task,) = group["Tasks"]
    assert job["ID"] == "llm-prefetch-m-n-1" and job["Type"] == "batch"
    assert group["Constraints"][-1] == {
        "LTarget": "${node.unique.id}",
        "RTarget": "n-1",
        "Operand": "=",
    }
    assert task["Config"] == {"image": "x", "entrypoint": ["hf"], "args": download_argv(model)}
    assert task["Env"] == {"HF_HOME": "/h", "HF_TOKEN": "hf_x"}
    assert (
        task["Resources"]["Devices"] is None
        and group["Volumes"]["model-cache"]["Source"] == "llm-model-cache"
    )


def test_nothing_to_download_or_nowhere_to_put_it_is_a_shape_error() -> None:
    with pytest.raises(JobShapeError, match="path"):
        download_argv(_model(source="/models/m"))
    bare = Node(id="n-2", name="gpu-2", cpu_cores=32, memory_gb=256)
    with pytest.raises(JobShapeError, match="host volume"):
        build_prefetch_job(_template(), _model(), bare, datetime(2026, 12, 5, tzinfo=UTC))


def test_a_prefetch_job_reads_back_by_its_allocations() -> None:
    job = build_prefetch_job(
        _template(), _model(revision="v1"), NODE, datetime(2026, 12, 5, tzinfo=UTC)
    )
    states = {
        (): "running",
        ("pending",): "running",
        ("complete",): "complete",
        ("failed",): "failed",
        ("failed", "complete"): "complete",
    }
    for clients, state in states.items():
        allocs = [{"ClientStatus": c, "CreateIndex": i} for i, c in enumerate(clients)]
        read = prefetch_of(job, allocs)
        assert read is not None and (read.state, read.node, read.revision) == (state, "n-1", "v1")
    assert prefetch_of({**job, "Stop": True}, []) is None
    assert prefetch_of({**job, "Status": "dead"}, []).state == "failed"  # type: ignore[union-attr]
