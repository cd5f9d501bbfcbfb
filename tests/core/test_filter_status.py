"""A filter answers with a status: its words and whether preemption could help on the node
(unschedulable) or not (unresolvable), as kube-scheduler's Status. Plans list, per profile,
the filters whose "no" was unresolvable. A plain sentence still works: unresolvable from a
static filter, unschedulable from a dynamic one."""

from __future__ import annotations

from typing import Any

from preemption_snapshots import model, node, replica, snap, stops

from scheduler.core.decide import decide
from scheduler.core.inventory import NodeState
from scheduler.core.models import Snapshot
from scheduler.core.plugins import Choice, PlaceContext, Plugins, Status

H100 = "NVIDIA H100 80GB HBM3"


def _gpu(gid: str) -> dict[str, Any]:
    return {"id": gid, "model": H100, "memory_gb": 80}


def _snapshot(gpus: int, want_gpus: int, gpu_models: list[str] | None = None) -> Snapshot:
    profile: dict[str, Any] = {"name": "p", "gpus": want_gpus, "cpu_cores": 4, "memory_gb": 16}
    if gpu_models is not None:
        profile["gpu_models"] = gpu_models
    return Snapshot.model_validate(
        {
            "now": "2026-12-02T10:00:00Z",
            "nodes": [
                {
                    "id": f"n{i}",
                    "name": f"n{i}",
                    "cpu_cores": 64,
                    "memory_gb": 512,
                    "gpus": [
                        {"id": f"n{i}-g{j}", "model": H100, "memory_gb": 80} for j in range(gpus)
                    ],
                }
                for i in range(3)
            ],
            "models": [
                {
                    "name": "m",
                    "owner": "org",
                    "scaling": {"min": 1, "max": 1},
                    "profiles": [profile],
                }
            ],
            "demand": {"m": {"inflight": 1}},
        }
    )


class Reserved:
    name = "reserved"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> Status | None:
        return Status("reserved for batch", unresolvable=True)


class Busy:
    name = "busy"
    static = False

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        return "busy now"


def _trial(snap: Snapshot, plugins: Plugins | None = None) -> Any:
    [trial] = decide(snap, plugins).models["m"].tried
    return trial


def test_a_filter_that_says_preemption_cannot_help_is_listed_as_unresolvable() -> None:
    trial = _trial(_snapshot(4, 1), Plugins(filters=[Reserved()]))
    assert trial.short == {"reserved": 3}
    assert trial.reasons == {"reserved": {"reserved for batch": 3}}
    assert trial.unresolvable == ["reserved"]


def test_a_plain_sentence_from_a_dynamic_filter_is_unschedulable() -> None:
    trial = _trial(_snapshot(4, 1), Plugins(filters=[Busy()]))
    assert trial.short == {"busy": 3}
    assert trial.unresolvable == []


def test_built_in_static_filters_are_unresolvable_and_dynamic_ones_are_not() -> None:
    assert _trial(_snapshot(4, 1, gpu_models=["A100"])).unresolvable == ["gpu-model"]
    too_few = _trial(_snapshot(2, 4))
    assert too_few.short == {"gpu-count": 3} and too_few.unresolvable == []


class Counting:
    """Refuses every node, counting how often each is asked."""

    name = "counting"
    static = False

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        self.asked[node.node.id] = self.asked.get(node.node.id, 0) + 1
        return "refused"


def test_the_walk_that_places_is_the_walk_that_explains() -> None:
    # The reasons come from the placing walk's own counts: no node is asked again to say why,
    # and a node the index skips for capacity is never asked at all.
    # (No preemption: its trials would walk a clone of their own.)
    snap = _snapshot(4, 1)
    snap = snap.model_copy(update={"settings": snap.settings.model_copy(update={"max_victims": 0})})
    counting = Counting()
    trial = _trial(snap, Plugins(filters=[counting]))
    assert trial.short == {"counting": 3}
    assert counting.asked == {"n0": 1, "n1": 1, "n2": 1}
    skipped = Counting()
    assert _trial(_snapshot(2, 4), Plugins(filters=[skipped])).short == {"gpu-count": 3}
    assert skipped.asked == {}


class WhileShared:
    """Refuses a node while another model runs on it, saying whether preemption could help."""

    name = "while-shared"
    static = False

    def __init__(self, unresolvable: bool) -> None:
        self.unresolvable = unresolvable

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> Status | None:
        if any(n for name, n in node.per_model.items() if name != ctx.model.name):
            return Status("shared with another model", self.unresolvable)
        return None


def test_preemption_is_tried_only_where_a_filter_said_it_could_help() -> None:
    # Four GPUs free beside a lower-class replica, refused while it runs there: the replica
    # gives way when the filter says preemption could help (unschedulable), and no victim is
    # searched for on the node when it says it could not (unresolvable), whichever is true.
    s = snap(
        nodes=[node("n1", 8)],
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=4),
            model("low", "opportunistic", "org/b", gpus=4),
        ],
        replicas=[replica("low-1", "low", [("n1", [f"n1-g{i}" for i in range(4)])])],
    )
    helped = decide(s, Plugins(filters=[WhileShared(unresolvable=False)]))
    assert [a.replica for a in stops(helped)] == ["low-1"]
    plan = decide(s, Plugins(filters=[WhileShared(unresolvable=True)]))
    assert stops(plan) == []
    assert plan.models["crit"].tried[0].unresolvable == ["while-shared"]
