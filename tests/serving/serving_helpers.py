"""Helpers for the serving tests: the shared runtime flag fixtures and rendered jobs."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from llm_scheduler_standins.nomad.hcl import parse_job
from scheduler.adapters.nomad_jobs import build_job, template_variables
from scheduler.core.models import GPU, MigSlice, Model, Node, Shard, StartAction

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"

# shared/ lies beside the checkout (CI lays a copy there); /work/shared is the workplace mount.
RUNTIME_FIXTURES = next(
    (
        p
        for p in (
            Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "runtimes",
            Path("/work/shared/fixtures/runtimes"),
        )
        if p.is_dir()
    ),
    Path("/work/shared/fixtures/runtimes"),
)
FIXTURE_FILES = {"vllm": "vllm-serve-flags.txt", "sglang": "sglang-launch-server-flags.txt"}


@cache
def fixture_flags(runtime: str) -> frozenset[str]:
    """Every long flag the real parser accepts, from the shared fixture (not the shipped copy)."""
    text = (RUNTIME_FIXTURES / FIXTURE_FILES[runtime]).read_text()
    return frozenset(x.strip() for x in text.splitlines() if x.strip().startswith("--"))


def nodes() -> dict[str, Node]:
    def gpus(node: str, n: int) -> list[GPU]:
        return [GPU(id=f"GPU-{node}-{i}", model=H100, memory_gb=80) for i in range(n)]

    mig = GPU(
        id="pci-0000:07:00.0",
        model=A100,
        memory_gb=40,
        mig=[MigSlice(id="MIG-1", profile="3g.20gb", memory_gb=20)],
    )
    return {
        "n1": Node(id="n1", name="a", address="10.0.0.1", pool="gpu", cpu_cores=64,
                   memory_gb=512, gpus=gpus("n1", 8)),
        "n2": Node(id="n2", name="b", address="10.0.0.2", pool="gpu", cpu_cores=64,
                   memory_gb=512, gpus=gpus("n2", 8)),
        "m1": Node(id="m1", name="m", address="10.0.0.3", cpu_cores=64, memory_gb=512,
                   gpus=[mig]),
    }  # fmt: skip


# profile shape -> (profile, shards of the start)
SHAPES: dict[str, tuple[dict[str, Any], list[Shard]]] = {
    "one-gpu": ({"name": "one-gpu", "gpus": 1}, [Shard(node="n1", gpus=["GPU-n1-0"])]),
    "tp4": ({"name": "tp4", "gpus": 4}, [Shard(node="n1", gpus=[f"GPU-n1-{i}" for i in range(4)])]),
    "tp8": ({"name": "tp8", "gpus": 8}, [Shard(node="n1", gpus=[f"GPU-n1-{i}" for i in range(8)])]),
    "mig": ({"name": "mig", "mig_profile": "3g.20gb"}, [Shard(node="m1", gpus=["MIG-1"])]),
    "2-node": (
        {"name": "tp8x2", "gpus": 8, "shards": 2},
        [
            Shard(node="n1", gpus=[f"GPU-n1-{i}" for i in range(8)]),
            Shard(node="n2", gpus=[f"GPU-n2-{i}" for i in range(8)]),
        ],
    ),
}


def model(runtime: str, shape: str, *, load_grace_s: int = 2400, **serve: Any) -> Model:
    return Model.model_validate(
        {
            "name": "llama-3.1-8b",
            "owner": "org/a",
            "profiles": [SHAPES[shape][0]],
            "load_grace_s": load_grace_s,
            "serve": {"source": "meta-llama/Llama-3.1-8B-Instruct", "runtime": runtime, **serve},
        }
    )


def shipped_template(runtime: str) -> str:
    path = resources.files("scheduler") / "data" / "jobspecs" / f"{runtime}.nomad.hcl"
    return path.read_text(encoding="utf-8")


def render(runtime: str, shape: str, *, load_grace_s: int = 2400, **serve: Any) -> dict[str, Any]:
    """The job a start of `shape` registers, from the shipped template parsed the way
    Nomad's /v1/jobs/parse answers (the stand-in's parser) with the scheduler's variables."""
    m = model(runtime, shape, load_grace_s=load_grace_s, **serve)
    image = m.serve.image if m.serve and m.serve.image else f"{runtime}:test"
    template = parse_job(
        shipped_template(runtime), variables=template_variables(m, image), canonicalize=True
    )
    action = StartAction(
        model=m.name,
        profile=str(SHAPES[shape][0]["name"]),
        replica="r-1a2b",
        shards=SHAPES[shape][1],
        reason="test",
    )
    return build_job(copy.deepcopy(template), m, action, nodes(), NOW, "llm")
