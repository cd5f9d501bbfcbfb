"""A missing or broken template, or a model that cannot be rendered, is a permanent error for that
model: recorded once in its status, logged once, retried with exponential backoff, never in a
tight loop; other models start meanwhile. Real NomadAPI against the Nomad stand-in over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import NOW
from structlog.testing import capture_logs

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.adapters.nomad_api import NomadAPI
from scheduler.core.models import GPU, Model, Node, Shard, StartAction
from scheduler.service.actuator import Actuator
from scheduler.service.unservable import TEMPLATE_BACKOFF_MIN_S
from scheduler.service.work import Facts

FLEET = [
    Node(id="n1", name="a", address="10.0.0.1", cpu_cores=32, memory_gb=256,
         gpus=[GPU(id=f"GPU-{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80) for i in range(4)]),
]  # fmt: skip


class CountingNomad(NomadAPI):
    """The real client; it only counts the parse and register calls that reach Nomad."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.parses = 0
        self.registers = 0

    def parse(self, hcl: str, variables: str) -> dict[str, Any]:
        self.parses += 1
        return super().parse(hcl, variables)

    def register(self, job: dict[str, Any]) -> dict[str, Any]:
        self.registers += 1
        return super().register(job)


def _model(name: str, runtime: str = "vllm", **serve: Any) -> Model:
    return Model.model_validate(
        {
            "name": name,
            "owner": "org/a",
            "profiles": [{"name": "one", "gpus": 1}],
            "serve": {"source": f"org/{name}", "runtime": runtime, **serve},
        }
    )


def _facts(models: list[Model]) -> Facts:
    return Facts(
        models={m.name: m for m in models},
        jobs={},
        listed=frozenset(),
        nodes={n.id: n for n in FLEET},
        now=NOW,
    )


def _start(model: str, n: int, gpu: int = 0) -> StartAction:
    return StartAction(
        model=model,
        profile="one",
        replica=f"r-{n:04d}",
        shards=[Shard(node="n1", gpus=[f"GPU-{gpu}"])],
        reason="",
    )


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    with DevCluster(fleet=FLEET, load_delay_s=0.05) as dc:
        yield dc


def test_a_broken_template_backs_off_per_model_and_heals(
    cluster: DevCluster, tmp_path: Path
) -> None:
    override = tmp_path / "vllm.nomad.hcl"
    override.write_text('job "llm" {\n  group "shard" {\n    bogus = 1\n  }\n}\n')
    nomad = CountingNomad(cluster.nomad_url)
    now = [0.0]
    actuator = Actuator(
        nomad, namespace=None, images={"vllm": "img", "sglang": "img"},
        jobspec_dir=str(tmp_path), clock=lambda: now[0],
    )  # fmt: skip
    broken, fine = _model("broken"), _model("fine", runtime="sglang")
    view = _facts([broken, fine])
    outcomes: list[tuple[str, bool, str | None]] = []

    def hook(action: Any, ok: bool, error: str | None) -> None:
        outcomes.append((action.model, ok, error))

    with capture_logs() as logs:
        for n in range(20):  # twenty passes, each with a fresh replica id, as the core plans
            actuator._start(view, _start("broken", n), hook)
        actuator._start(view, _start("fine", 99, gpu=1), hook)
    assert nomad.parses == 2  # one for broken (then backoff), one for fine
    assert [o for o in outcomes if o[0] == "broken"] == [
        ("broken", False, outcomes[0][2])
    ]  # reported once
    error = actuator.errors["broken"]
    assert str(override) in error and "Failed to parse job" in error
    assert [e["event"] for e in logs].count("model_unservable") == 1
    assert ("fine", True, None) in outcomes and "fine" not in actuator.errors
    assert nomad.registers == 1  # only fine's job

    # After the backoff, one more try; then the wait doubles.
    now[0] = TEMPLATE_BACKOFF_MIN_S + 1
    actuator._start(view, _start("broken", 100), hook)
    assert nomad.parses == 3
    now[0] += TEMPLATE_BACKOFF_MIN_S * 1.5
    actuator._start(view, _start("broken", 101), hook)
    assert nomad.parses == 3  # still waiting: 2 x the first delay
    # The operator fixes the template: the next try after the backoff starts the replica.
    override.unlink()
    now[0] += TEMPLATE_BACKOFF_MIN_S * 2
    actuator._start(view, _start("broken", 102), hook)
    assert outcomes[-1] == ("broken", True, None) and "broken" not in actuator.errors
    assert nomad.registers == 2


def test_an_unrenderable_model_is_not_retried_each_pass_until_it_is_edited(
    cluster: DevCluster,
) -> None:
    nomad = CountingNomad(cluster.nomad_url)
    actuator = Actuator(nomad, namespace=None, images={"vllm": "img"}, clock=lambda: 0.0)
    # A model built past the catalog's check (the core accepts any): the renderer refuses it.
    bad = _model("odd", extra_args={"--hf-model": "x"})
    view = _facts([bad])
    outcomes: list[bool] = []
    for n in range(5):
        actuator._start(view, _start("odd", n), lambda a, ok, e: outcomes.append(ok))
    assert outcomes == [False] and nomad.registers == 0
    assert "serve.extra_args.--hf-model: not a flag of vllm" in actuator.errors["odd"]
    # Edited in the catalog: tried at once, without waiting for the backoff.
    good = _model("odd", extra_args={"--enforce-eager": True})
    actuator._start(_facts([good]), _start("odd", 9), lambda a, ok, e: outcomes.append(ok))
    assert outcomes == [False, True] and nomad.registers == 1


def test_a_model_without_serve_cannot_start(cluster: DevCluster) -> None:
    nomad = CountingNomad(cluster.nomad_url)
    actuator = Actuator(nomad, namespace=None, images={"vllm": "img"}, clock=lambda: 0.0)
    bare = Model.model_validate({"name": "bare", "owner": "o", "profiles": [{"name": "one"}]})
    errors: list[str | None] = []
    actuator._start(_facts([bare]), _start("bare", 1), lambda a, ok, e: errors.append(e))
    assert errors and "serve: missing" in str(errors[0]) and nomad.parses == 0
