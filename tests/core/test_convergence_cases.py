"""Runs the seeded hunt (bench/hunt.py) found going round for ever, cut down to what still
cycled: three models on one or two GPUs, an owner guaranteed less than the fleet, every model
busy. The room preempted for one model went to a third (owed a guarantee, or below its
minimum), which was preempted in turn, and so on, until that room was reserved for the model
it was taken for (rule R5). Each reaches a fixed point within the bound, without a cycle, a
turn or a room taken twice (convergence.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from convergence import DEFAULT, ZERO, fight
from preemption_snapshots import model, node, snap

from scheduler.core.models import Snapshot


def with_small(m: dict[str, Any]) -> dict[str, Any]:
    """The model may also run on one GPU (a second, smaller profile)."""
    small = {"name": "small", "gpus": 1, "cpu_cores": 0, "memory_gb": 0}
    return {**m, "profiles": [*m["profiles"], small]}


def crowd(
    nodes: list[dict[str, Any]],
    models: list[dict[str, Any]],
    quota: dict[str, Any],
    settings: dict[str, int],
) -> Snapshot:
    return snap(
        nodes=nodes,
        models=models,
        quotas=[quota],
        demand={m["name"]: {"inflight": 40} for m in models},
        settings=settings,
    )


def two_gpus_guarantee_of_one(settings: dict[str, int]) -> Snapshot:
    # chat (critical, 2 GPUs) takes the node from batch and small; small and batch, below
    # what org/a is guaranteed, take a freed GPU back before chat can start.
    return crowd(
        [node("n0", 2)],
        [
            model("chat", "critical", "org/a", lo=1, hi=4, gpus=2),
            model("small", "opportunistic", "org/a", hi=1),
            model("batch", "standard", "org/a", hi=3),
        ],
        {"owner": "org/a", "guarantee": {"gpus": 1, "cpu_cores": 64, "memory_gb": 512}},
        settings,
    )


def one_gpu_limited(settings: dict[str, int]) -> Snapshot:
    # One GPU, org guaranteed and limited to it: three models of org/a, two critical, one
    # of them asking for 2 GPUs or, failing that, 1.
    return crowd(
        [node("n0", 1)],
        [
            model("a", "standard", "org/a", lo=2, hi=3),
            model("b", "critical", "org/a", hi=2),
            with_small(model("c", "critical", "org/a", lo=1, hi=4, gpus=2, on_demand=True)),
        ],
        {"owner": "org", "guarantee": {"gpus": 1}, "limit": {"gpus": 1}},
        settings,
    )


def one_gpu_two_owners(settings: dict[str, int]) -> Snapshot:
    # One GPU; org/b's model and two of org/a/x (guaranteed 1 GPU, weight 2).
    return crowd(
        [node("n1", 1)],
        [
            model("b", "standard", "org/b", lo=2, hi=3),
            model("x", "opportunistic", "org/a/x", lo=2, hi=4),
            with_small(model("y", "standard", "org/a/x", hi=1, gpus=2)),
        ],
        {
            "owner": "org/a/x",
            "guarantee": {"gpus": 1, "cpu_cores": 64, "memory_gb": 512},
            "limit": {"gpus": 3},
            "weight": 2.0,
        },
        settings,
    )


CASES = [two_gpus_guarantee_of_one, one_gpu_limited, one_gpu_two_owners]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("settings", [DEFAULT, ZERO], ids=["default", "zero"])
def test_crowded_runs_reach_a_fixed_point(case: Any, settings: dict[str, int]) -> None:
    for slow in (0, 1):  # stops taking no pass, or one (drawn per pass)
        watch = fight(case(settings), 40, random.Random(slow))
        assert watch.finish() == [], watch.findings
