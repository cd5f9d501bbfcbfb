"""mig_advice: which drained MIG GPU to re-partition for models pending on a MIG profile."""

from __future__ import annotations

from typing import Any

from scheduler.core.mig_advice import mig_advice
from scheduler.core.models import (
    GPU,
    MigSlice,
    Model,
    ModelStatus,
    Node,
    Plan,
    Replica,
    Shard,
    Snapshot,
    StartAction,
)

A100 = "NVIDIA A100-SXM4-80GB"


def mig_gpu(gpu_id: str, profiles: list[str], model: str = A100) -> GPU:
    return GPU(
        id=gpu_id,
        model=model,
        memory_gb=80,
        mig=[
            MigSlice(id=f"MIG-{gpu_id}-{i}", profile=p, memory_gb=10)
            for i, p in enumerate(profiles)
        ],
    )


def node(gpus: list[GPU], *, node_id: str = "n-c1", name: str = "gpu-c1", cpu: float = 64) -> Node:
    return Node(id=node_id, name=name, cpu_cores=cpu, memory_gb=512, gpus=gpus)


def mig_model(name: str, profile: str, *, cpu: float = 4, cls: str = "standard") -> Model:
    return Model.model_validate(
        {
            "name": name,
            "owner": "org/a",
            "class": cls,
            "profiles": [
                {"name": "mig", "mig_profile": profile, "cpu_cores": cpu, "memory_gb": 16}
            ],
        }
    )


def snapshot(
    nodes: list[Node], models: list[Model], replicas: list[Replica] | None = None
) -> Snapshot:
    return Snapshot(now="2026-12-02T10:00:00Z", nodes=nodes, models=models, replicas=replicas or [])


def plan(statuses: dict[str, tuple[int, int]], **extra: Any) -> Plan:
    return Plan(
        models={
            name: ModelStatus(desired=d, live=live, pending="no free MIG slice of profile")
            for name, (d, live) in statuses.items()
        },
        **extra,
    )


SEVEN_SMALL = ["1g.10gb"] * 7


def test_advises_the_drained_gpu_for_the_pending_demand() -> None:
    snap = snapshot(
        [node([mig_gpu("pci-0000:07:00.0", SEVEN_SMALL)])], [mig_model("llama-8b-mig", "3g.40gb")]
    )
    assert mig_advice(snap, plan({"llama-8b-mig": (2, 0)})) == [
        "re-partition GPU pci-0000:07:00.0 on node gpu-c1 (NVIDIA A100-SXM4-80GB) into 3g.40gb x2 "
        "to serve pending llama-8b-mig"
    ]


def test_asks_only_for_what_is_short() -> None:
    snap = snapshot([node([mig_gpu("pci-0000:07:00.0", SEVEN_SMALL)])], [mig_model("m", "3g.40gb")])
    (line,) = mig_advice(snap, plan({"m": (3, 2)}))
    assert "into 3g.40gb x1 to serve pending m" in line


def test_mixes_models_on_one_gpu_and_spills_to_the_next() -> None:
    gpus = [mig_gpu("pci-0000:07:00.0", SEVEN_SMALL), mig_gpu("pci-0000:08:00.0", SEVEN_SMALL)]
    models = [mig_model("big", "4g.40gb", cls="critical"), mig_model("mid", "3g.40gb")]
    advice = mig_advice(snapshot([node(gpus)], models), plan({"big": (1, 0), "mid": (2, 0)}))
    assert advice == [
        "re-partition GPU pci-0000:07:00.0 on node gpu-c1 (NVIDIA A100-SXM4-80GB) into "
        "4g.40gb x1, 3g.40gb x1 to serve pending big, mid",
        "re-partition GPU pci-0000:08:00.0 on node gpu-c1 (NVIDIA A100-SXM4-80GB) into "
        "3g.40gb x1 to serve pending mid",
    ]


def test_no_advice_for_a_gpu_with_a_replica_or_a_planned_start_on_it() -> None:
    gpu = mig_gpu("pci-0000:07:00.0", SEVEN_SMALL)
    assert gpu.mig is not None
    models = [mig_model("m", "3g.40gb"), mig_model("small", "1g.10gb")]
    replica = Replica(
        id="r-1",
        model="small",
        profile="mig",
        state="stopping",  # still on the GPU until it is gone
        created_at="2026-12-02T09:00:00Z",
        shards=[Shard(node="n-c1", gpus=[gpu.mig[3].id])],
    )
    assert mig_advice(snapshot([node([gpu])], models, [replica]), plan({"m": (1, 0)})) == []
    start = StartAction(
        model="small",
        profile="mig",
        replica="r-2",
        shards=[Shard(node="n-c1", gpus=[gpu.mig[0].id])],
        reason="scale up",
    )
    assert mig_advice(snapshot([node([gpu])], models), plan({"m": (1, 0)}, actions=[start])) == []


def test_no_advice_when_nothing_is_pending_or_the_profile_is_already_offered() -> None:
    gpu = mig_gpu("pci-0000:07:00.0", ["3g.40gb", "3g.40gb"])
    models = [mig_model("m", "3g.40gb")]
    assert mig_advice(snapshot([node([gpu])], models), Plan()) == []
    satisfied = Plan(models={"m": ModelStatus(desired=1, live=1)})
    assert mig_advice(snapshot([node([gpu])], models), satisfied) == []
    # Free 3g.40gb slices exist and the model still waits: not a layout problem.
    assert mig_advice(snapshot([node([gpu])], models), plan({"m": (1, 0)})) == []


def test_skips_unhealthy_ineligible_unknown_and_whole_gpus() -> None:
    models = [mig_model("m", "3g.40gb")]
    sick = mig_gpu("pci-a", SEVEN_SMALL).model_copy(update={"healthy": False})
    unknown = mig_gpu("pci-b", ["1g.5gb"], model="NVIDIA A30")
    whole = GPU(id="GPU-1", model=A100, memory_gb=80)
    nodes = [
        node([sick, unknown, whole]),
        node([mig_gpu("pci-c", SEVEN_SMALL)], node_id="n-2", name="gpu-c2").model_copy(
            update={"eligible": False}
        ),
    ]
    assert mig_advice(snapshot(nodes, models), plan({"m": (1, 0)})) == []


def test_node_cpu_limits_how_many_replicas_the_advice_counts() -> None:
    snap = snapshot(
        [node([mig_gpu("pci-0000:07:00.0", SEVEN_SMALL)], cpu=6)],
        [mig_model("m", "3g.40gb", cpu=4)],
    )
    (line,) = mig_advice(snap, plan({"m": (2, 0)}))
    assert "into 3g.40gb x1 to serve pending m" in line


def test_profile_not_on_this_board_is_not_advised() -> None:
    snap = snapshot([node([mig_gpu("pci-0000:07:00.0", SEVEN_SMALL)])], [mig_model("m", "3g.71gb")])
    assert mig_advice(snap, plan({"m": (1, 0)})) == []
