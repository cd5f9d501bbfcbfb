"""What holds for a whole pass: the catalog, the replicas and what each counts for.

`PassFacts` is built once per pass and never changes: trials and the pass itself change only
the capacity (inventory.Inventory). `collect` walks the replicas once for both: the facts, and
what the replicas hold per node and per owner, which the inventory starts from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import NamedTuple

from scheduler.core.models import Amount, Model, Profile, Quota, Replica, Snapshot

Vec = tuple[float, float, float]  # gpus, cpu_cores, memory_gb
ZERO: Vec = (0.0, 0.0, 0.0)


class LiveReplica:
    """A replica that counts, of a model in the catalog, with the fields of it that later walks
    over every live replica read (the victim pool, held_back): read here, in the one walk over
    the snapshot's replicas, they are read from this object afterwards. (A plain class, made
    per live replica every pass: compiled, it is built and read natively; see NodeUse.)"""

    def __init__(
        self,
        replica: Replica,
        model: Model,
        need: Vec,
        id: str,
        created_at: datetime,
        ready_at: datetime | None,
        last_used_at: datetime | None,
        preempted_for: str | None,
    ) -> None:
        self.replica = replica
        self.model = model
        self.need = need  # what one replica of its profile counts against quotas, all shards
        self.id = id
        self.created_at = created_at
        self.ready_at = ready_at
        self.last_used_at = last_used_at
        self.preempted_for = preempted_for


@cache
def mig_fraction(profile_name: str) -> float:
    """A MIG slice counts as (compute slices in its name)/7 of a GPU: `3g.40gb` is 3/7."""
    head = profile_name.split("g", 1)[0]
    return int(head) / 7 if head.isdigit() else 1 / 7


def add(a: Vec, b: Vec, sign: float = 1.0) -> Vec:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])


@cache
def owner_prefixes(owner: str) -> tuple[str, ...]:
    parts = owner.split("/")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


def profile_need(profile: Profile) -> Vec:
    """What one replica of a profile counts against quotas, all shards together."""
    gpus = mig_fraction(profile.mig_profile) if profile.mig_profile else float(profile.gpus)
    n = profile.shards
    return (gpus * n, profile.cpu_cores * n, profile.memory_gb * n)


def shard_held(model: Model | None, prof: Profile | None) -> tuple[float, float]:
    """CPU and memory one shard of a replica holds, when its allocation does not say: what its
    profile asks; for a profile since removed from its model, the most any profile of the
    model asks (a node is never overcommitted on a guess); for an unknown model, nothing."""
    if prof is not None:
        return prof.cpu_cores, prof.memory_gb
    if model is None:
        return 0.0, 0.0
    return max(p.cpu_cores for p in model.profiles), max(p.memory_gb for p in model.profiles)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


# What the built-in static filters read of each GPU (with its MIG slices kept apart).
# Order does not matter to them, so alike nodes with their MIG GPUs in other places are one
# shape: eligible, then (model, memory, healthy) of each whole GPU and (model, memory,
# healthy, any slice healthy) of each MIG GPU, sorted.
Shape = tuple[bool, tuple[tuple[str, float, bool], ...], tuple[tuple[str, float, bool, bool], ...]]


def _gpu_kinds(shapes: dict[Shape, int]) -> dict[tuple[str, float], int]:
    """Healthy whole GPUs on eligible nodes by (model, memory)."""
    kinds: dict[tuple[str, float], int] = {}
    for (eligible, whole, _), n in shapes.items():
        if eligible:
            for model, memory, healthy in whole:
                if healthy:
                    kinds[(model, memory)] = kinds.get((model, memory), 0) + n
    return kinds


@dataclass(frozen=True, slots=True)
class PassFacts:
    """The pass's fixed facts (the dicts are never written after the build)."""

    models: dict[str, Model]  # the catalog, by name
    replicas: dict[str, Replica]  # every replica, by id
    by_model: dict[str, list[Replica]]  # every replica, per model name
    live: list[LiveReplica]  # replicas that count, of a model in the catalog
    # Replicas that count, per model name: of a profile the model has (`current`), or of one
    # since removed from it (`stale`: they no longer count as live, and are replaced).
    current: dict[str, list[Replica]]
    stale: dict[str, list[Replica]]
    starting: set[str]  # models with a replica still starting
    stopping_preempted: list[Replica]  # preempted for a model and still on their way out
    # Node id -> replicas that count and have their one shard there (any model).
    single: dict[str, list[Replica]]
    # Model -> the profiles its replicas run (any state), each once. (A tuple, not a set per
    # model: most models run one profile.)
    profiles_held: dict[str, tuple[str, ...]]
    quotas: dict[str, Quota]  # by owner prefix
    limits: dict[str, Amount]  # quota limits, by owner prefix
    slice_share: dict[str, float]  # MIG slice id -> the share of a GPU it counts as
    # Healthy devices on eligible nodes, used or not: whole GPUs by (model, memory), slices
    # by MIG profile. How much of the fleet a profile could ever use.
    gpu_kinds: dict[tuple[str, float], int]
    slice_kinds: dict[str, int]
    # The eligible nodes' GPUs (a MIG GPU: its slices, 1/7 each), CPU cores and memory: the
    # fleet's capacity fair shares are fractions of (fairshare.py).
    capacity: Vec


class NodeUse:
    """What the replicas hold on one node. (A plain class: compiled, a dataclass is built
    through its generated __init__, which runs as Python.)"""

    def __init__(
        self, cpu: float, memory: float, per_model: dict[str, int], single: list[Replica]
    ) -> None:
        self.cpu = cpu
        self.memory = memory
        self.per_model = per_model  # model -> its replicas there
        # Replicas that count and have their one shard there (any model), in snapshot order.
        self.single = single


class Collected(NamedTuple):
    """One walk over the replicas: the facts it yields and what they hold."""

    models: dict[str, Model]
    slice_share: dict[str, float]
    live: list[LiveReplica]
    replicas: dict[str, Replica]  # by id
    by_model: dict[str, list[Replica]]
    current: dict[str, list[Replica]]
    stale: dict[str, list[Replica]]
    starting: set[str]
    stopping_preempted: list[Replica]
    used: set[str]  # device ids held (replicas, and other jobs' allocations)
    on_node: dict[str, NodeUse]  # what the replicas hold, per node id
    profiles_held: dict[str, tuple[str, ...]]
    usage: dict[str, Vec]  # per owner path prefix
    capacity: Vec  # PassFacts.capacity


def _fleet(snap: Snapshot) -> tuple[dict[str, float], set[str], Vec]:
    """The MIG slices' shares, the devices other jobs hold, and the eligible capacity."""
    slice_share: dict[str, float] = {}  # MIG slice id -> the share of a GPU it counts as
    fractions: dict[str, float] = {}  # MIG profile -> its share (mig_fraction, asked once)
    used: set[str] = set()
    gpus_cap = cpu_cap = mem_cap = 0.0
    for node in snap.nodes:
        eligible = node.eligible
        if eligible:
            cpu_cap += node.cpu_cores
            mem_cap += node.memory_gb
        for gpu in node.gpus:
            mig = gpu.mig
            if mig is None:
                if eligible:
                    gpus_cap += 1.0
                continue
            if eligible:
                gpus_cap += len(mig) / 7
            for s in mig:
                mig_profile = s.profile
                share = fractions.get(mig_profile)
                if share is None:
                    share = fractions[mig_profile] = mig_fraction(mig_profile)
                slice_share[s.id] = share
        for d in node.held:
            used.add(d)
    return slice_share, used, (max(gpus_cap, 1.0), max(cpu_cap, 1.0), max(mem_cap, 1.0))


Size = tuple[float, float, Model | None, Vec, bool]  # shard CPU, memory, model, need, known


class _Walk:
    """The one walk over the replicas: what it has found so far. A model's replicas come one
    after another (the adapter lists them by job id, which starts with the model's name):
    what is looked up by name or profile is looked up again only when either changes."""

    def __init__(
        self, models: dict[str, Model], slice_share: dict[str, float], used: set[str]
    ) -> None:
        self.models = models
        self.slice_share = slice_share
        self.used = used
        self.on_node: dict[str, NodeUse] = {}
        self.per_owner: dict[str, list[float]] = {}  # gpus, cpu, memory held, by owner
        self.sizes: dict[tuple[str, str], Size] = {}
        self.live: list[LiveReplica] = []
        self.replicas: dict[str, Replica] = {}
        self.by_model: dict[str, list[Replica]] = {}
        self.current: dict[str, list[Replica]] = {}
        self.stale: dict[str, list[Replica]] = {}
        self.starting: set[str] = set()
        self.stopping_preempted: list[Replica] = []
        self.last_name: str | None = None
        self.last_profile: str | None = None
        self.reps: list[Replica] = []  # the current model's, in by_model
        self.kept_current: list[Replica] | None = None  # the current model's, once it has one
        self.kept_stale: list[Replica] | None = None
        self.size: Size = (0.0, 0.0, None, ZERO, False)

    def _size(self, name: str, profile: str) -> Size:
        known = self.sizes.get((name, profile))
        if known is None:
            model = self.models.get(name)
            prof = model.profile(profile) if model else None
            held = shard_held(model, prof)
            need = profile_need(prof) if prof else ZERO
            known = self.sizes[(name, profile)] = (held[0], held[1], model, need, prof is not None)
        return known

    def add(self, rep: Replica) -> None:
        self.replicas[rep.id] = rep
        name = rep.model
        profile = rep.profile
        new_model = name != self.last_name
        if new_model:
            self.last_name = name
            self.kept_current = self.kept_stale = None
            self.reps = self.by_model.setdefault(name, [])
        self.reps.append(rep)
        state = rep.state
        counts = state != "stopping"
        if counts:
            if state == "starting":
                self.starting.add(name)
        elif rep.preempted_for:
            self.stopping_preempted.append(rep)
        if new_model or profile != self.last_profile:
            self.last_profile = profile
            self.size = self._size(name, profile)
        cpu, mem, model, need, known = self.size
        if model is not None and counts:
            self._count(rep, model, need, known)
        gpus = self._hold(rep, name, cpu, mem, counts)
        if model is not None:
            n = len(rep.shards)
            tot = self.per_owner.get(model.owner)
            if tot is None:
                tot = self.per_owner[model.owner] = [0.0, 0.0, 0.0]
            tot[0] += gpus
            tot[1] += cpu * n
            tot[2] += mem * n

    def _count(self, rep: Replica, model: Model, need: Vec, known: bool) -> None:
        """A replica that counts: live, and current or stale by its profile."""
        self.live.append(
            LiveReplica(
                rep,
                model,
                need,
                rep.id,
                rep.created_at,
                rep.ready_at,
                rep.last_used_at,
                rep.preempted_for,
            )
        )
        if known:
            if self.kept_current is None:
                self.kept_current = self.current.setdefault(rep.model, [])
            self.kept_current.append(rep)
        else:
            if self.kept_stale is None:
                self.kept_stale = self.stale.setdefault(rep.model, [])
            self.kept_stale.append(rep)

    def _hold(self, rep: Replica, name: str, cpu: float, mem: float, counts: bool) -> float:
        """What the replica holds on each node; the GPUs it counts for (slices in part)."""
        shards = rep.shards
        used, slice_share, on_node = self.used, self.slice_share, self.on_node
        gpus = 0.0
        for sh in shards:
            devs = sh.gpus
            sliced = False
            for d in devs:  # a loop, not set.update and isdisjoint: method calls, compiled
                used.add(d)
                if d in slice_share:
                    sliced = True
            node_id = sh.node
            use = on_node.get(node_id)
            if use is None:
                use = on_node[node_id] = NodeUse(0.0, 0.0, {}, [])
            held_cpu, held_mem = sh.cpu_cores, sh.memory_gb
            use.cpu += cpu if held_cpu is None else held_cpu
            use.memory += mem if held_mem is None else held_mem
            pm = use.per_model
            pm[name] = pm.get(name, 0) + 1
            if counts and len(shards) == 1:
                use.single.append(rep)
            if not sliced:
                gpus += len(devs)
            else:
                gpus += sum(slice_share.get(d, 1.0) for d in devs)
        return gpus


def collect(snap: Snapshot) -> Collected:
    slice_share, used, capacity = _fleet(snap)
    walk = _Walk({m.name: m for m in snap.models}, slice_share, used)
    for rep in snap.replicas:
        walk.add(rep)
    profiles_held: dict[str, tuple[str, ...]] = {}
    for name, profile in walk.sizes:
        profiles_held[name] = (*profiles_held.get(name, ()), profile)  # sizes' keys are unique
    usage: dict[str, Vec] = {}
    for owner, tot in walk.per_owner.items():
        for p in owner_prefixes(owner):
            usage[p] = add(usage.get(p, ZERO), (tot[0], tot[1], tot[2]))
    return Collected(
        models=walk.models,
        slice_share=slice_share,
        live=walk.live,
        replicas=walk.replicas,
        by_model=walk.by_model,
        current=walk.current,
        stale=walk.stale,
        starting=walk.starting,
        stopping_preempted=walk.stopping_preempted,
        used=used,
        on_node=walk.on_node,
        profiles_held=profiles_held,
        usage=usage,
        capacity=capacity,
    )


QUOTA_UNITS = {"gpus": "GPUs", "cpu_cores": "CPU cores", "memory_gb": "GB of memory"}


def _amount(value: float) -> str:
    """44.57, not 44.5714 (a MIG slice counts as a fraction of a GPU)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def limit_exceeded(
    limits: dict[str, Amount], usage: dict[str, Vec], owner: str, need: Vec
) -> str | None:
    """The first quota limit on the owner's path that `need` more would pass (rule P3), as a
    sentence; an unset dimension is not limited."""
    for p in owner_prefixes(owner):
        limit = limits.get(p)
        if limit is None:
            continue
        have = usage.get(p, ZERO)
        for i, (dim, cap) in enumerate(
            (("gpus", limit.gpus), ("cpu_cores", limit.cpu_cores), ("memory_gb", limit.memory_gb))
        ):
            if cap is not None and have[i] + need[i] > cap + 1e-9:
                unit = QUOTA_UNITS.get(dim, dim)
                return (
                    f"quota limit of {p} reached: {_amount(have[i])} of {_amount(cap)} {unit} "
                    f"in use, one more replica needs {_amount(need[i])}"
                )
    return None
