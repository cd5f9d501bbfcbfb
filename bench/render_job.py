"""Job rendering per replica: the time from a start action to the JSON job to register, after
the template was parsed once (the actuator caches the parse per runtime, image and service).

Rendering runs in the actuator, outside the decision pass. For each runtime and profile shape
(one GPU, tp4, tp8, a MIG slice, two nodes of 8) it times build_job() (argv rendering, the flag
check, the job's deep copy and placement) and prints JSON with median and p99 in microseconds.

    .venv/bin/python -m bench.render_job --repeat 2000
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from llm_scheduler_standins.nomad.hcl import parse_job
from scheduler.adapters.nomad_jobs import build_job, template_variables
from scheduler.core.models import GPU, MigSlice, Model, Node, Shard, StartAction

NOW = datetime(2026, 12, 3, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def _nodes() -> dict[str, Node]:
    def gpus(node: str) -> list[GPU]:
        return [GPU(id=f"GPU-{node}-{i}", model=H100, memory_gb=80) for i in range(8)]

    mig = GPU(
        id="pci-7",
        model="NVIDIA A100-SXM4-40GB",
        memory_gb=40,
        mig=[MigSlice(id="MIG-1", profile="3g.20gb", memory_gb=20)],
    )
    return {
        "n1": Node(id="n1", name="a", address="10.0.0.1", cpu_cores=64, memory_gb=512,
                   gpus=gpus("n1")),
        "n2": Node(id="n2", name="b", address="10.0.0.2", cpu_cores=64, memory_gb=512,
                   gpus=gpus("n2")),
        "m1": Node(id="m1", name="m", address="10.0.0.3", cpu_cores=64, memory_gb=512,
                   gpus=[mig]),
    }  # fmt: skip


def _all(node: str, n: int) -> list[str]:
    return [f"GPU-{node}-{i}" for i in range(n)]


SHAPES: dict[str, tuple[dict[str, Any], list[Shard]]] = {
    "one-gpu": ({"name": "p", "gpus": 1}, [Shard(node="n1", gpus=_all("n1", 1))]),
    "tp4": ({"name": "p", "gpus": 4}, [Shard(node="n1", gpus=_all("n1", 4))]),
    "tp8": ({"name": "p", "gpus": 8}, [Shard(node="n1", gpus=_all("n1", 8))]),
    "mig": ({"name": "p", "mig_profile": "3g.20gb"}, [Shard(node="m1", gpus=["MIG-1"])]),
    "2-node": (
        {"name": "p", "gpus": 8, "shards": 2},
        [Shard(node="n1", gpus=_all("n1", 8)), Shard(node="n2", gpus=_all("n2", 8))],
    ),
}


def _time(runtime: str, shape: str, repeat: int) -> dict[str, float]:
    profile, shards = SHAPES[shape]
    model = Model.model_validate(
        {
            "name": "llama-3.1-70b",
            "owner": "org/a",
            "profiles": [profile],
            "serve": {
                "source": "meta-llama/Llama-3.1-70B-Instruct",
                "runtime": runtime,
                "options": {"context_length": 32768, "dtype": "bfloat16"},
                "extra_args": {"--enforce-eager": True} if runtime == "vllm" else {},
            },
        }
    )
    text = (resources.files("scheduler") / "data" / "jobspecs" / f"{runtime}.nomad.hcl").read_text()
    template = parse_job(text, variables=template_variables(model, "img"), canonicalize=True)
    nodes = _nodes()
    samples = []
    for i in range(repeat):
        action = StartAction(model=model.name, profile="p", replica=f"r-{i}", shards=shards,
                             reason="")  # fmt: skip
        start = time.perf_counter()
        build_job(template, model, action, nodes, NOW)
        samples.append(time.perf_counter() - start)
    samples.sort()
    return {
        "median_us": round(samples[len(samples) // 2] * 1e6, 1),
        "p99_us": round(samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    out = {
        f"{runtime}/{shape}": _time(runtime, shape, args.repeat)
        for runtime in ("vllm", "sglang")
        for shape in SHAPES
    }
    print(json.dumps({"repeat": args.repeat, "build_job": out}, indent=2))


if __name__ == "__main__":
    main()
