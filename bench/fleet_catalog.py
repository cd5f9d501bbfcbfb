"""Deterministic synthetic model catalogs and tenant quotas for the benchmarks (fleetgen.py
makes the fleets and snapshots they go with). Every draw is from a seeded `random.Random`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from scheduler.core.models import Amount, ClassName, Model, Node, Profile, Quota, Scaling

TENANTS: dict[str, tuple[str, ...]] = {
    "acme": ("acme/search", "acme/chat"),
    "globex": ("globex/ml",),
    "initech": ("initech/research", "initech/assist"),
}


@dataclass(frozen=True)
class ModelKind:
    """A family of models with the same profiles; `weight` is its share of the catalog."""

    stem: str
    profiles: tuple[Profile, ...]
    weight: float


MODEL_KINDS: tuple[ModelKind, ...] = (
    ModelKind(
        "qwen-1.5b",
        (
            Profile(name="mig-1g", mig_profile="1g.10gb", cpu_cores=2, memory_gb=16),
            Profile(name="g1", gpus=1, gpu_memory_gb=24, cpu_cores=4, memory_gb=32),
        ),
        0.12,
    ),
    ModelKind(
        "llama-8b",
        (
            Profile(name="g1", gpus=1, gpu_memory_gb=40, cpu_cores=8, memory_gb=64),
            Profile(name="mig-3g", mig_profile="3g.40gb", cpu_cores=4, memory_gb=48),
        ),
        0.42,
    ),
    ModelKind(
        "mistral-24b",
        (
            Profile(name="g1-80", gpus=1, gpu_memory_gb=80, cpu_cores=8, memory_gb=96),
            Profile(name="tp2", gpus=2, gpu_memory_gb=40, cpu_cores=12, memory_gb=128),
        ),
        0.18,
    ),
    ModelKind(
        "llama-70b",
        (
            Profile(
                name="tp4",
                gpus=4,
                gpu_memory_gb=80,
                gpu_models=["H100", "A100-SXM4-80GB"],
                cpu_cores=24,
                memory_gb=384,
            ),
            Profile(name="tp8", gpus=8, gpu_memory_gb=40, cpu_cores=48, memory_gb=640),
        ),
        0.17,
    ),
    ModelKind(
        "llama-70b-fast",
        (
            Profile(
                name="tp2",
                gpus=2,
                gpu_memory_gb=80,
                gpu_models=["H100"],
                cpu_cores=16,
                memory_gb=256,
            ),
            Profile(name="tp4", gpus=4, gpu_memory_gb=80, cpu_cores=24, memory_gb=384),
        ),
        0.09,
    ),
    ModelKind(
        "llama-405b",
        (
            Profile(
                name="tp8-pp2",
                gpus=8,
                shards=2,
                gpu_memory_gb=80,
                gpu_models=["H100"],
                cpu_cores=96,
                memory_gb=1536,
            ),
        ),
        0.02,
    ),
)


CLASSES: tuple[ClassName, ...] = ("critical", "standard", "opportunistic")


def replica_gpus(profile: Profile) -> int:
    """GPUs (a MIG slice counts as one device) one replica of `profile` holds."""
    return profile.gpus * profile.shards


def catalog(n_models: int, seed: int = 0, gpu_budget: float | None = None) -> list[Model]:
    """`n_models` models. With `gpu_budget` (GPUs per model), `scaling.max` is sized so the
    catalog's wants roughly match it; otherwise a few replicas each."""
    rng = random.Random(f"catalog-{seed}")
    owners = [team for teams in TENANTS.values() for team in teams]
    models: list[Model] = []
    for index in range(n_models):
        kind = rng.choices(MODEL_KINDS, [k.weight for k in MODEL_KINDS])[0]
        klass = rng.choices(CLASSES, (0.15, 0.55, 0.30))[0]
        per_replica = replica_gpus(kind.profiles[0])
        if gpu_budget is None:
            top = rng.randint(1, 4)
        else:
            top = max(1, round(rng.uniform(0.5, 1.6) * gpu_budget / per_replica))
        on_demand = klass == "opportunistic" and rng.random() < 0.5
        floor = 0 if klass == "opportunistic" else 1
        models.append(
            Model(
                name=f"{kind.stem}-{index:05d}",
                owner=rng.choice(owners),
                class_=klass,
                scaling=Scaling(
                    min=min(floor, top), max=top, target_per_replica=16, on_demand=on_demand
                ),
                profiles=list(kind.profiles),
            )
        )
    return models


def quotas(nodes: list[Node]) -> list[Quota]:
    """Tenant guarantees that add up to 80% of the GPUs, limits at 60% each; teams uncapped."""
    total = sum(len(n.gpus) for n in nodes)
    shares = {"acme": 0.4, "globex": 0.25, "initech": 0.15}
    return [
        Quota(
            owner=tenant,
            guarantee=Amount(gpus=math.floor(total * share)),
            limit=Amount(gpus=math.floor(total * 0.6)),
        )
        for tenant, share in shares.items()
    ]
