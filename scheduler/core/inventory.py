"""What is free where, built once per pass: free devices per node, CPU, memory, quota usage.

Indexed so placement visits only nodes that could hold a shard: eligible nodes by their count
of free whole GPUs, and by the MIG profiles they have a free slice of. `clone()` is
copy-on-write per node, for trying a set of preemption victims without touching the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.models import GPU, Amount, MigSlice, Model, Node, Profile, Quota, Snapshot

Vec = tuple[float, float, float]  # gpus, cpu_cores, memory_gb
ZERO: Vec = (0.0, 0.0, 0.0)


def mig_fraction(profile_name: str) -> float:
    """A MIG slice counts as (compute slices in its name)/7 of a GPU: `3g.40gb` is 3/7."""
    head = profile_name.split("g", 1)[0]
    return int(head) / 7 if head.isdigit() else 1 / 7


def add(a: Vec, b: Vec, sign: float = 1.0) -> Vec:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])


def owner_prefixes(owner: str) -> list[str]:
    parts = owner.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def profile_need(profile: Profile) -> Vec:
    """What one replica of a profile counts against quotas, all shards together."""
    gpus = mig_fraction(profile.mig_profile) if profile.mig_profile else float(profile.gpus)
    n = profile.shards
    return (gpus * n, profile.cpu_cores * n, profile.memory_gb * n)


@dataclass
class NodeState:
    node: Node
    free_gpus: list[GPU]  # whole, healthy, not in MIG mode, unused; by id
    free_slices: dict[str, list[MigSlice]]  # MIG profile -> healthy unused slices, by id
    free_cpu: float
    free_mem: float
    used_units: int  # devices in use, for bin-packing
    total_units: int
    per_model: dict[str, int]  # replicas per model on this node, for spreading

    def copy(self) -> NodeState:
        return NodeState(
            self.node,
            list(self.free_gpus),
            {k: list(v) for k, v in self.free_slices.items()},
            self.free_cpu,
            self.free_mem,
            self.used_units,
            self.total_units,
            dict(self.per_model),
        )


@dataclass
class Held:
    """What one existing replica holds, to give back when it is stopped (in a trial)."""

    model: str
    owner: str | None
    shards: list[tuple[str, list[str], float, float]]  # node, device ids, cpu, memory
    amount: Vec


@dataclass
class Inventory:
    nodes: dict[str, NodeState]
    devices: dict[str, tuple[str, GPU | None, MigSlice | None]]  # id -> node, gpu or slice
    by_free: dict[int, set[str]]
    by_slice: dict[str, set[str]]
    usage: dict[str, Vec]  # per owner path prefix
    limits: dict[str, Amount]
    quotas: dict[str, Quota]
    held: dict[str, Held] = field(default_factory=dict)
    _owned: set[str] = field(default_factory=set)  # node ids this copy may mutate in place

    # ------------------------------------------------------------ building

    @classmethod
    def build(cls, snap: Snapshot) -> Inventory:
        models: dict[str, Model] = {m.name: m for m in snap.models}
        devices: dict[str, tuple[str, GPU | None, MigSlice | None]] = {}
        for node in snap.nodes:
            for gpu in node.gpus:
                devices[gpu.id] = (node.id, gpu, None)
                for s in gpu.mig or []:
                    devices[s.id] = (node.id, None, s)
        used: set[str] = set()
        node_cpu: dict[str, float] = {}
        node_mem: dict[str, float] = {}
        per_model: dict[str, dict[str, int]] = {}
        usage: dict[str, Vec] = {}
        held: dict[str, Held] = {}
        for rep in snap.replicas:
            model = models.get(rep.model)
            prof = model.profile(rep.profile) if model else None
            cpu = prof.cpu_cores if prof else 0.0
            mem = prof.memory_gb if prof else 0.0
            amount = ZERO
            shards: list[tuple[str, list[str], float, float]] = []
            for sh in rep.shards:
                used.update(sh.gpus)
                node_cpu[sh.node] = node_cpu.get(sh.node, 0.0) + cpu
                node_mem[sh.node] = node_mem.get(sh.node, 0.0) + mem
                pm = per_model.setdefault(sh.node, {})
                pm[rep.model] = pm.get(rep.model, 0) + 1
                gpus = 0.0
                for dev in sh.gpus:
                    sl = devices[dev][2] if dev in devices else None
                    gpus += mig_fraction(sl.profile) if sl is not None else 1.0
                amount = add(amount, (gpus, cpu, mem))
                shards.append((sh.node, list(sh.gpus), cpu, mem))
            owner = model.owner if model else None
            held[rep.id] = Held(rep.model, owner, shards, amount)
            if owner is not None:
                for p in owner_prefixes(owner):
                    usage[p] = add(usage.get(p, ZERO), amount)
        nodes: dict[str, NodeState] = {}
        for node in snap.nodes:
            free_gpus: list[GPU] = []
            free_slices: dict[str, list[MigSlice]] = {}
            total = used_units = 0
            for gpu in node.gpus:
                if gpu.mig is None:
                    total += 1
                    if gpu.id in used:
                        used_units += 1
                    elif gpu.healthy:
                        free_gpus.append(gpu)
                    continue
                for s in gpu.mig:
                    total += 1
                    if s.id in used:
                        used_units += 1
                    elif s.healthy and gpu.healthy:
                        free_slices.setdefault(s.profile, []).append(s)
            free_gpus.sort(key=lambda g: g.id)
            for lst in free_slices.values():
                lst.sort(key=lambda s: s.id)
            nodes[node.id] = NodeState(
                node,
                free_gpus,
                free_slices,
                node.cpu_cores - node_cpu.get(node.id, 0.0),
                node.memory_gb - node_mem.get(node.id, 0.0),
                used_units,
                total,
                per_model.get(node.id, {}),
            )
        inv = cls(
            nodes,
            devices,
            {},
            {},
            usage,
            {q.owner: q.limit for q in snap.quotas if q.limit is not None},
            {q.owner: q for q in snap.quotas},
            held,
            set(nodes),
        )
        for ns in nodes.values():
            inv._index(ns)
        return inv

    def clone(self) -> Inventory:
        return Inventory(
            dict(self.nodes),
            self.devices,
            {k: set(v) for k, v in self.by_free.items()},
            {k: set(v) for k, v in self.by_slice.items()},
            dict(self.usage),
            self.limits,
            self.quotas,
            dict(self.held),
            set(),
        )

    # ------------------------------------------------------------ index

    def _index(self, ns: NodeState) -> None:
        if not ns.node.eligible:
            return
        nid = ns.node.id
        if ns.free_gpus:
            self.by_free.setdefault(len(ns.free_gpus), set()).add(nid)
        for prof, lst in ns.free_slices.items():
            if lst:
                self.by_slice.setdefault(prof, set()).add(nid)

    def _unindex(self, ns: NodeState) -> None:
        nid = ns.node.id
        self.by_free.get(len(ns.free_gpus), set()).discard(nid)
        for prof in ns.free_slices:
            self.by_slice.get(prof, set()).discard(nid)

    def _mutable(self, node_id: str) -> NodeState:
        ns = self.nodes[node_id]
        if node_id not in self._owned:
            ns = ns.copy()
            self.nodes[node_id] = ns
            self._owned.add(node_id)
        return ns

    def candidate_nodes(self, profile: Profile) -> list[str]:
        """Eligible nodes that have at least the free devices one shard of `profile` needs."""
        if profile.mig_profile is not None:
            return sorted(self.by_slice.get(profile.mig_profile, ()))
        out: list[str] = []
        for count, ids in self.by_free.items():
            if count >= profile.gpus:
                out.extend(ids)
        out.sort()
        return out

    # ------------------------------------------------------------ changes

    def take(self, model: Model, profile: Profile, node_id: str, device_ids: list[str]) -> None:
        ns = self._mutable(node_id)
        self._unindex(ns)
        taken = set(device_ids)
        ns.free_gpus = [g for g in ns.free_gpus if g.id not in taken]
        for prof, lst in ns.free_slices.items():
            ns.free_slices[prof] = [s for s in lst if s.id not in taken]
        ns.free_cpu -= profile.cpu_cores
        ns.free_mem -= profile.memory_gb
        ns.used_units += len(device_ids)
        ns.per_model[model.name] = ns.per_model.get(model.name, 0) + 1
        self._index(ns)

    def charge(self, owner: str, amount: Vec) -> None:
        for p in owner_prefixes(owner):
            self.usage[p] = add(self.usage.get(p, ZERO), amount)

    def release(self, replica_id: str) -> None:
        """Give back what an existing replica holds (trials only; real stops wait for Nomad)."""
        h = self.held.pop(replica_id, None)
        if h is None:
            return
        for node_id, dev_ids, cpu, mem in h.shards:
            if node_id not in self.nodes:
                continue
            ns = self._mutable(node_id)
            self._unindex(ns)
            ns.free_cpu += cpu
            ns.free_mem += mem
            ns.per_model[h.model] = max(ns.per_model.get(h.model, 0) - 1, 0)
            for dev in dev_ids:
                where = self.devices.get(dev)
                if where is None or where[0] != node_id:
                    continue
                ns.used_units -= 1
                _, gpu, sl = where
                if gpu is not None and gpu.healthy and gpu.mig is None:
                    ns.free_gpus.append(gpu)
                elif sl is not None and sl.healthy and self._parent_healthy(node_id, sl):
                    ns.free_slices.setdefault(sl.profile, []).append(sl)
            ns.free_gpus.sort(key=lambda g: g.id)
            for lst in ns.free_slices.values():
                lst.sort(key=lambda s: s.id)
            self._index(ns)
        if h.owner is not None:
            for p in owner_prefixes(h.owner):
                self.usage[p] = add(self.usage.get(p, ZERO), h.amount, -1.0)

    def _parent_healthy(self, node_id: str, sl: MigSlice) -> bool:
        for gpu in self.nodes[node_id].node.gpus:
            if gpu.mig and any(s.id == sl.id for s in gpu.mig):
                return gpu.healthy
        return False

    def quota_block(self, owner: str, need: Vec) -> str | None:
        """The first limit on the owner's path the need would exceed, as a sentence."""
        for p in owner_prefixes(owner):
            limit = self.limits.get(p)
            if limit is None:
                continue
            have = self.usage.get(p, ZERO)
            for i, (dim, cap) in enumerate(
                (
                    ("gpus", limit.gpus),
                    ("cpu_cores", limit.cpu_cores),
                    ("memory_gb", limit.memory_gb),
                )
            ):
                if cap is not None and have[i] + need[i] > cap + 1e-9:
                    return f"quota limit of {p} reached ({dim} {have[i]:g} of {cap:g})"
        return None
