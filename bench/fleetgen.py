"""Deterministic synthetic fleets, catalogs and steady-state snapshots for the benchmarks.

Everything draws from one seeded `random.Random`, so a (size, seed) pair always yields the
same snapshot. The shapes follow what a Nomad + NVIDIA device plugin cluster reports:
8-GPU nodes of H100 80GB / A100 80GB / A100 40GB, NVLink peer groups of 4 or 8, and a
tenth of the GPUs in MIG mode with layouts that `nvidia-smi mig` accepts.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from bench.fleet_catalog import catalog, quotas
from scheduler.core.fleet import CachedSnapshot, NodeCache
from scheduler.core.models import (
    GPU,
    Demand,
    MigSlice,
    Model,
    Node,
    Profile,
    Replica,
    Serve,
    Shard,
    Snapshot,
)

NOW = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
GB = 10**9
STATES: tuple[Literal["running", "starting", "stopping"], ...] = ("running", "starting", "stopping")

H100 = "NVIDIA H100 80GB HBM3"
A100_80 = "NVIDIA A100-SXM4-80GB"
A100_40 = "NVIDIA A100-SXM4-40GB"


@dataclass(frozen=True)
class NodeType:
    gpu_model: str
    gpu_memory_gb: int
    cpu_cores_per_gpu: int
    memory_gb_per_gpu: int
    nvlink_group: int  # GPUs per NVLink domain (8: NVSwitch baseboard, 4: two quads)
    weight: float


NODE_TYPES: tuple[NodeType, ...] = (
    NodeType(H100, 80, 28, 256, 8, 0.45),
    NodeType(A100_80, 80, 32, 256, 8, 0.35),
    NodeType(A100_40, 40, 16, 128, 4, 0.20),
)

# Valid MIG layouts per board (checked against mig_geometry.plan_layout in the smoke test).
MIG_LAYOUTS: dict[int, tuple[tuple[str, ...], ...]] = {
    80: (
        ("3g.40gb", "3g.40gb"),
        ("1g.10gb",) * 7,
        ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
        ("4g.40gb", "3g.40gb"),
    ),
    40: (
        ("3g.20gb", "3g.20gb"),
        ("1g.5gb",) * 7,
        ("2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"),
    ),
}


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _slice_memory(profile: str) -> float:
    return float(profile.split(".", 1)[1].removesuffix("gb"))


def _mig_slices(rng: random.Random, memory_gb: int) -> list[MigSlice]:
    layout = rng.choice(MIG_LAYOUTS[memory_gb])
    return [MigSlice(id=f"MIG-{_uuid(rng)}", profile=p, memory_gb=_slice_memory(p)) for p in layout]


def fleet(
    n_nodes: int, gpus_per_node: int = 8, mig_fraction: float = 0.1, seed: int = 0
) -> list[Node]:
    """`n_nodes` GPU nodes; exactly round(mig_fraction * all GPUs) GPUs are in MIG mode,
    taken as the last 2 or 4 GPUs of randomly chosen nodes (operators partition per node)."""
    rng = random.Random(f"fleet-{seed}")
    types = [rng.choices(NODE_TYPES, [t.weight for t in NODE_TYPES])[0] for _ in range(n_nodes)]
    mig_left = round(mig_fraction * n_nodes * gpus_per_node)
    mig_count = [0] * n_nodes
    order = list(range(n_nodes))
    rng.shuffle(order)
    for index in order:
        if mig_left <= 0:
            break
        take = min(mig_left, rng.choice((2, 4)), gpus_per_node)
        mig_count[index] = take
        mig_left -= take
    # Fewer nodes than the MIG share needs (tiny fleets): top up node by node.
    for index in order:
        while mig_left > 0 and mig_count[index] < gpus_per_node:
            mig_count[index] += 1
            mig_left -= 1

    nodes: list[Node] = []
    for index, node_type in enumerate(types):
        ids = [f"GPU-{_uuid(rng)}" for _ in range(gpus_per_node)]
        group = min(node_type.nvlink_group, gpus_per_node)
        gpus: list[GPU] = []
        for g, gpu_id in enumerate(ids):
            start = g - g % group
            peers = [ids[p] for p in range(start, min(start + group, gpus_per_node)) if p != g]
            in_mig = g >= gpus_per_node - mig_count[index]
            gpus.append(
                GPU(
                    id=gpu_id,
                    model=node_type.gpu_model,
                    memory_gb=node_type.gpu_memory_gb,
                    healthy=rng.random() > 0.002,
                    nvlink_peers=[] if in_mig else peers,
                    mig=_mig_slices(rng, node_type.gpu_memory_gb) if in_mig else None,
                )
            )
        nodes.append(
            Node(
                id=f"node-{index:05d}",
                name=f"gpu-{index:05d}",
                datacenter="dc1" if index % 2 == 0 else "dc2",
                eligible=rng.random() > 0.005,
                cpu_cores=node_type.cpu_cores_per_gpu * gpus_per_node,
                memory_gb=node_type.memory_gb_per_gpu * gpus_per_node,
                gpus=gpus,
            )
        )
    return nodes


# ---------------------------------------------------------------- steady state


@dataclass
class _Room:
    """What is left on one node while the generator places existing replicas."""

    node: Node
    whole: list[GPU]
    slices: dict[str, list[str]] = field(default_factory=dict)
    cpu: float = 0.0
    memory: float = 0.0

    @classmethod
    def of(cls, node: Node) -> _Room:
        room = cls(node, [], {}, node.cpu_cores, node.memory_gb)
        for gpu in node.gpus:
            if not gpu.healthy:
                continue
            if gpu.mig is None:
                room.whole.append(gpu)
            else:
                for s in gpu.mig:
                    room.slices.setdefault(s.profile, []).append(s.id)
        return room

    def take(self, profile: Profile, commit: bool = True) -> list[str] | None:
        """The device ids one shard of `profile` gets here, or None; `commit=False` only asks."""
        if not self.node.eligible or self.cpu < profile.cpu_cores:
            return None
        if self.memory < profile.memory_gb:
            return None
        if profile.mig_profile is not None:
            free = self.slices.get(profile.mig_profile)
            if not free:
                return None
            if not commit:
                return [free[-1]]
            taken = [free.pop()]
        else:
            fitting = [g for g in self.whole if _gpu_fits(g, profile)]
            if len(fitting) < profile.gpus:
                return None
            chosen = fitting[: profile.gpus]
            if not commit:
                return [g.id for g in chosen]
            ids = {g.id for g in chosen}
            self.whole = [g for g in self.whole if g.id not in ids]
            taken = [g.id for g in chosen]
        self.cpu -= profile.cpu_cores
        self.memory -= profile.memory_gb
        return taken


def _gpu_fits(gpu: GPU, profile: Profile) -> bool:
    if profile.gpu_memory_gb is not None and gpu.memory_gb < profile.gpu_memory_gb:
        return False
    return profile.gpu_models is None or any(m in gpu.model for m in profile.gpu_models)


def _place(
    rng: random.Random, rooms: list[_Room], profile: Profile, tries: int = 48
) -> list[Shard] | None:
    """Shards for one replica on randomly sampled nodes (bounded work, may give up)."""
    chosen: list[int] = []
    for _ in range(tries):
        index = rng.randrange(len(rooms))
        if index in chosen or rooms[index].take(profile, commit=False) is None:
            continue
        chosen.append(index)
        if len(chosen) == profile.shards:
            return [Shard(node=rooms[i].node.id, gpus=rooms[i].take(profile) or []) for i in chosen]
    return None


def _demand_for(rng: random.Random, desired: int, target: float) -> Demand:
    if desired == 0:
        return Demand(inflight=0, queued=0, last_used=NOW - timedelta(hours=rng.randint(1, 48)))
    total = max(1, desired * int(target) - rng.randrange(int(target)))
    queued = rng.randrange(total // 4 + 1)
    return Demand(
        inflight=total - queued,
        queued=queued,
        last_used=NOW - timedelta(seconds=rng.randint(0, 30)),
    )


def steady_snapshot(
    n_nodes: int,
    models_per_node: float = 2.0,
    gpus_per_node: int = 8,
    mig_fraction: float = 0.1,
    seed: int = 0,
    caches: bool = False,
) -> Snapshot:
    """A fleet in a realistic steady state: most models at their desired count, some wanting
    to scale up (some of which only fit by preemption), some to scale down. With `caches`,
    every model serves a repository and every node reports a model cache (with_caches)."""
    rng = random.Random(f"steady-{seed}")
    nodes = fleet(n_nodes, gpus_per_node, mig_fraction, seed)
    n_models = max(1, round(n_nodes * models_per_node))
    total_gpus = n_nodes * gpus_per_node
    # Sized so the wants add up to a little more than the fleet: preemption has work to do.
    models = catalog(n_models, seed, gpu_budget=1.4 * total_gpus / n_models)
    rooms = [_Room.of(n) for n in nodes]

    demand, plans = _wanted(rng, models)
    replicas = _existing(rng, rooms, plans, demand)
    snap = Snapshot(
        now=NOW, nodes=nodes, models=models, quotas=quotas(nodes), demand=demand, replicas=replicas
    )
    return with_caches(snap, random.Random(f"caches-{seed}")) if caches else snap


def with_caches(snap: Snapshot, rng: random.Random) -> Snapshot:
    """Every model serving `org/NAME` (weights 16 GB per GPU of its first profile) and every
    node's model cache holding the weights of the models running there and of three others
    at random, with 0-2 TB free (a tenth of the nodes report no free room)."""
    weights = {m.name: 16 * GB * max(m.profiles[0].gpus, 1) for m in snap.models}
    models = [m.model_copy(update={"serve": Serve(source=f"org/{m.name}")}) for m in snap.models]
    running: dict[str, set[str]] = {}
    for r in snap.replicas:
        for sh in r.shards:
            running.setdefault(sh.node, set()).add(r.model)
    names = sorted(weights)
    nodes = []
    for n in snap.nodes:
        held = sorted(running.get(n.id, set()) | set(rng.sample(names, min(3, len(names)))))
        cache = NodeCache(
            volume="llm-model-cache",
            free_bytes=None if rng.random() < 0.1 else rng.randrange(2000) * GB,
            snapshots=[
                CachedSnapshot(
                    source=f"org/{name}",
                    commit=f"{names.index(name) + 1:040x}",
                    revisions=["main"],
                    bytes=weights[name],
                    weights_bytes=weights[name],
                    last_used=NOW,
                )
                for name in held
            ],
        )
        nodes.append(n.model_copy(update={"cache": cache, "host_volumes": ["llm-model-cache"]}))
    return snap.model_copy(update={"models": models, "nodes": nodes})


def _wanted(
    rng: random.Random, models: list[Model]
) -> tuple[dict[str, Demand], list[tuple[Model, int]]]:
    """Each model's demand and how many replicas it has now: most at their desired count, some
    short (scaling up), some over (scaling down), some with none yet."""
    demand: dict[str, Demand] = {}
    plans: list[tuple[Model, int]] = []
    for model in models:
        top = model.scaling.max
        roll = rng.random()
        if model.scaling.on_demand and roll < 0.3:
            desired, existing = 0, 1  # idle past the grace period: scales to zero
        elif roll < 0.80:
            desired = rng.randint(max(1, model.scaling.min), top)
            existing = desired
        elif roll < 0.88:
            desired = rng.randint(max(1, model.scaling.min), top)
            existing = max(0, desired - rng.randint(1, 2))  # scale up
        elif roll < 0.95 and top > 1:
            desired = rng.randint(max(1, model.scaling.min), top - 1)
            existing = desired + 1  # scale down
        else:
            desired = rng.randint(max(1, model.scaling.min), top)
            existing = 0  # new or lost: pending
        demand[model.name] = _demand_for(rng, desired, model.scaling.target_per_replica)
        plans.append((model, existing))
    return demand, plans


def _existing(
    rng: random.Random,
    rooms: list[_Room],
    plans: list[tuple[Model, int]],
    demand: dict[str, Demand],
) -> list[Replica]:
    """The replicas that run now, placed node by node."""
    replicas: list[Replica] = []
    # Critical models go last so some of them find the fleet full and need preemption.
    plans.sort(key=lambda mp: mp[0].class_ == "critical")
    counter = 0
    for model, existing in plans:
        for _ in range(existing):
            placed = None
            for profile in model.profiles:
                shards = _place(rng, rooms, profile)
                if shards is not None:
                    placed = (profile, shards)
                    break
            if placed is None:
                break
            counter += 1
            created = NOW - timedelta(minutes=rng.randint(15, 60 * 24 * 7))
            state = rng.choices(STATES, (0.96, 0.03, 0.01))[0]
            if state == "starting":
                # A replica still loading was created within its load grace (30 min by
                # default), not days ago: the core times out older ones. No extra draw, so the
                # rest of the snapshot is as before.
                created = NOW - timedelta(seconds=(NOW - created).total_seconds() % 1500)
            replicas.append(
                Replica(
                    id=f"r-{counter:06d}",
                    model=model.name,
                    profile=placed[0].name,
                    state=state,
                    created_at=created,
                    ready_at=None if state == "starting" else created + timedelta(minutes=4),
                    last_used_at=demand[model.name].last_used,
                    shards=placed[1],
                )
            )
    return replicas


def describe(snapshot: Snapshot) -> dict[str, int]:
    """Counts that show what a snapshot holds (printed next to timings)."""
    gpus = [g for n in snapshot.nodes for g in n.gpus]
    return {
        "nodes": len(snapshot.nodes),
        "gpus": len(gpus),
        "mig_gpus": sum(1 for g in gpus if g.mig is not None),
        "mig_slices": sum(len(g.mig or []) for g in gpus),
        "models": len(snapshot.models),
        "replicas": len(snapshot.replicas),
        "replica_gpus_in_use": sum(len(s.gpus) for r in snapshot.replicas for s in r.shards),
    }
