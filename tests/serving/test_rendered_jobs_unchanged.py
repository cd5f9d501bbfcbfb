"""The jobs the scheduler registers for the demo catalog stay byte for byte what they were
when job making moved into one place (adapters/job_maker.py): every model and profile, made
through JobMaker.make with Nomad's parse answered by the stand-in's parser, hashed as sent
(json.dumps, key order kept). A change to the job shape on purpose regenerates the file:
`python tests/serving/test_rendered_jobs_unchanged.py > tests/serving/rendered_demo_jobs.json`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llm_scheduler_standins.nomad.hcl import parse_job
from scheduler.adapters.job_maker import JobMaker
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.core.models import GPU, MigSlice, Node, Profile, Shard, StartAction
from scheduler.demo.catalog import MODELS

GOLDEN = Path(__file__).with_name("rendered_demo_jobs.json")
NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
IMAGES = {"vllm": "vllm/vllm-openai:v0.6.3", "sglang": "lmsysorg/sglang:v0.3.5"}


class ParsingNomad(NomadAPI):
    """Nomad's /v1/jobs/parse answered in process by the stand-in's parser; nothing else."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9")

    def parse(self, hcl: str, variables: str) -> dict[str, Any]:
        return parse_job(hcl, variables=variables, canonicalize=True)


def _fleet() -> dict[str, Node]:
    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    slices = [
        MigSlice(id="MIG-3g", profile="3g.40gb", memory_gb=40),
        MigSlice(id="MIG-2g", profile="2g.20gb", memory_gb=20),
        MigSlice(id="MIG-1g", profile="1g.10gb", memory_gb=10),
    ]
    return {
        "n1": Node(id="n1", name="a", address="10.0.0.1", pool="gpu", cpu_cores=64,
                   memory_gb=1024,
                   gpus=[GPU(id=f"GPU-n1-{i}", model=h100, memory_gb=80) for i in range(8)]),
        "n2": Node(id="n2", name="b", address="10.0.0.2", pool="gpu", cpu_cores=64,
                   memory_gb=1024,
                   gpus=[GPU(id=f"GPU-n2-{i}", model=h100, memory_gb=80) for i in range(8)]),
        "m1": Node(id="m1", name="m", address="10.0.0.3", pool="gpu", cpu_cores=64,
                   memory_gb=512, gpus=[GPU(id="GPU-m1-0", model=a100, memory_gb=80, mig=slices)]),
    }  # fmt: skip


def _shards(profile: Profile) -> list[Shard]:
    if profile.mig_profile:
        return [Shard(node="m1", gpus=[f"MIG-{profile.mig_profile.split('.')[0]}"])]
    nodes = ["n1", "n2"][: profile.shards]
    return [Shard(node=n, gpus=[f"GPU-{n}-{i}" for i in range(profile.gpus)]) for n in nodes]


def rendered() -> dict[str, str]:
    """model/profile -> sha256 of the job a start of it registers."""
    maker = JobMaker(ParsingNomad(), namespace="llm", images=IMAGES)
    out: dict[str, str] = {}
    for model in MODELS:
        for profile in model.profiles:
            action = StartAction(
                model=model.name,
                profile=profile.name,
                replica="r-0001",
                shards=_shards(profile),
                reason="golden",
            )
            job = maker.make(model, action, _fleet(), NOW)
            out[f"{model.name}/{profile.name}"] = hashlib.sha256(
                json.dumps(job).encode()
            ).hexdigest()
    return out


def test_the_demo_catalogs_jobs_are_rendered_as_before() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert len(golden) >= 10  # every model of the demo catalog, some with two profiles
    assert rendered() == golden


if __name__ == "__main__":
    sys.stdout.write(json.dumps(rendered(), indent=1, sort_keys=True) + "\n")
