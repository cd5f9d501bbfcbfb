"""Advice: which drained MIG GPU to re-partition so that models pending on a MIG profile fit.

The decision core never re-partitions a GPU itself (that needs root on the node: see
`llm-scheduler mig apply`); it tells the operator where a new layout would serve demand that
is waiting. A GPU qualifies when it is in MIG mode, healthy, on an eligible node, with a known
geometry, and drained: no replica (not even a stopping one) and no planned start uses it or any
of its slices. A model counts as pending when the plan leaves it below its desired count with
a pending reason, unless it is held after giving way or waits for room already being freed.
Quotas are not re-checked here: the advice says where room would be, the next
pass decides who gets it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.mig_geometry import Layout, geometry_for, plan_layout
from scheduler.core.models import CLASS_RANK, GPU, Model, Node, Plan, Profile, Snapshot, StartAction

WAITING = "waiting for preempted replicas to stop"


@dataclass
class _Pending:
    model: Model
    profiles: list[Profile]  # its MIG profiles, in its order of preference
    short: int


def _pending_mig_models(snapshot: Snapshot, plan: Plan) -> list[_Pending]:
    starts: dict[str, int] = {}
    for action in plan.actions:
        if isinstance(action, StartAction):
            starts[action.model] = starts.get(action.model, 0) + 1
    out: list[_Pending] = []
    for model in snapshot.models:
        status = plan.models.get(model.name)
        if status is None or status.pending is None:
            continue
        if model.name in plan.holds or status.pending == WAITING:
            continue  # held back by a preemption, or room already on its way: not short of it
        short = status.desired - status.live - starts.get(model.name, 0)
        profiles = [p for p in model.profiles if p.is_mig]
        if short > 0 and profiles:
            out.append(_Pending(model, profiles, short))
    # Higher classes first, then by name, so the advice is stable.
    out.sort(key=lambda p: (-CLASS_RANK[p.model.class_], p.model.name))
    return out


def _used_devices(snapshot: Snapshot, plan: Plan) -> set[str]:
    used = {dev for r in snapshot.replicas for s in r.shards for dev in s.gpus}
    used.update(dev for n in snapshot.nodes for dev in n.held)
    for action in plan.actions:
        if isinstance(action, StartAction):
            used.update(dev for s in action.shards for dev in s.gpus)
    return used


def _free_cpu_memory(snapshot: Snapshot, plan: Plan) -> dict[str, tuple[float, float]]:
    """CPU cores and memory left per node after counted replicas and planned starts."""
    profiles = {(m.name, p.name): p for m in snapshot.models for p in m.profiles}
    free = {n.id: (n.cpu_cores, n.memory_gb) for n in snapshot.nodes}
    holders = [(r.model, r.profile, r.shards) for r in snapshot.replicas if r.counts]
    holders += [(a.model, a.profile, a.shards) for a in plan.actions if isinstance(a, StartAction)]
    for model, profile_name, shards in holders:
        profile = profiles.get((model, profile_name))
        if profile is None:
            continue
        for shard in shards:
            if shard.node in free:
                cpu, mem = free[shard.node]
                free[shard.node] = (cpu - profile.cpu_cores, mem - profile.memory_gb)
    return free


def _drained(node: Node, gpu: GPU, used: set[str]) -> bool:
    if gpu.mig is None or not gpu.healthy or not node.eligible:
        return False
    if geometry_for(gpu.model) is None:
        return False
    devices = {gpu.id, *(s.id for s in gpu.mig)}
    return not devices & used and all(s.healthy for s in gpu.mig)


def _fit_count(profile: Profile, cpu: float, mem: float, wanted: int) -> int:
    by_cpu = int(cpu // profile.cpu_cores) if profile.cpu_cores > 0 else wanted
    by_mem = int(mem // profile.memory_gb) if profile.memory_gb > 0 else wanted
    return max(0, min(wanted, by_cpu, by_mem))


def _layout_for(
    gpu: GPU, pending: list[_Pending], cpu: float, mem: float
) -> tuple[Layout, dict[str, int], float, float] | None:
    """Greedy over pending models: as many of each one's MIG profile as still fit with the
    ones chosen before. Returns the layout, how many replicas of each model it serves, and the
    node's CPU and memory left after them."""
    geometry = geometry_for(gpu.model)
    assert geometry is not None
    offered = {s.profile for s in gpu.mig or []}
    want: dict[str, int] = {}
    served: dict[str, int] = {}
    layout: Layout | None = None
    for item in pending:
        if item.short <= 0:
            continue
        for profile in item.profiles:
            name = profile.mig_profile
            # A free slice of this profile already exists here and the model still waits:
            # something else holds it back, a new layout would not help.
            if name is None or geometry.profile(name) is None or name in offered:
                continue
            k = _fit_count(profile, cpu, mem, item.short)
            while k > 0:
                trial = plan_layout(gpu.model, {**want, name: want.get(name, 0) + k})
                if isinstance(trial, Layout):
                    want[name] = want.get(name, 0) + k
                    served[item.model.name] = k
                    cpu -= k * profile.cpu_cores
                    mem -= k * profile.memory_gb
                    layout = trial
                    break
                k -= 1
            if item.model.name in served:
                break
    if layout is None:
        return None
    return layout, served, cpu, mem


def mig_advice(snapshot: Snapshot, plan: Plan) -> list[str]:
    """Sentences such as "re-partition GPU pci-0000:07:00.0 on node gpu-c1
    (NVIDIA A100-SXM4-80GB) into 3g.40gb x2 to serve pending llama-8b-mig"."""
    pending = _pending_mig_models(snapshot, plan)
    if not pending:
        return []
    used = _used_devices(snapshot, plan)
    free = _free_cpu_memory(snapshot, plan)
    advice: list[str] = []
    for node in sorted(snapshot.nodes, key=lambda n: (n.name, n.id)):
        for gpu in sorted(node.gpus, key=lambda g: g.id):
            if not any(p.short > 0 for p in pending):
                return advice
            if not _drained(node, gpu, used):
                continue
            cpu, mem = free.get(node.id, (0.0, 0.0))
            found = _layout_for(gpu, pending, cpu, mem)
            if found is None:
                continue
            layout, served, cpu, mem = found
            for item in pending:
                item.short -= served.get(item.model.name, 0)
            free[node.id] = (cpu, mem)
            advice.append(
                f"re-partition GPU {gpu.id} on node {node.name} ({gpu.model}) into "
                f"{layout.describe()} to serve pending {', '.join(served)}"
            )
    return advice
