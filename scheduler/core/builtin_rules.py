"""What the built-in dynamic filters and scorers compute, as plain functions compiled with the
core. The built-in plugin classes (plugins.py) call them; the placer calls them directly on its
fast path (when no extra plugin of that kind is configured), so both paths say the same and a
placement visit makes no call into interpreted code.
"""

from __future__ import annotations

from scheduler.core.inventory import NodeState
from scheduler.core.models import GPU, Profile

CPU_SHORT = "too few free CPU cores"
MEMORY_SHORT = "too little free memory"
GPUS_SHORT = "too few free GPUs"
MAX_SPREAD = 5  # replicas of a model on one node beyond which spreading no longer counts


# ---------------------------------------------------------------- dynamic filters


def resources_short(p: Profile, node: NodeState) -> str | None:
    if node.free_cpu + 1e-9 < p.cpu_cores:
        return CPU_SHORT
    if node.free_mem + 1e-9 < p.memory_gb:
        return MEMORY_SHORT
    return None


def slice_short(p: Profile, node: NodeState) -> str | None:
    mig = p.mig_profile
    if mig is not None and not node.free_slices.get(mig):
        return f"no free {mig} slice"
    return None


def count_short(p: Profile, usable_free: int) -> str | None:
    if p.mig_profile is None and usable_free < p.gpus:
        return GPUS_SHORT
    return None


def builtin_dynamic_short(p: Profile, node: NodeState, usable_free: int) -> str | None:
    """What the three built-in dynamic filters say, in their order (node-resources,
    mig-profile, gpu-count), without a Choice: the core asks this directly on every visit when
    no extra dynamic filter is configured."""
    return resources_short(p, node) or slice_short(p, node) or count_short(p, usable_free)


# ---------------------------------------------------------------- choosing devices


def pick_gpus(gpus: list[GPU], k: int) -> list[GPU]:
    """k GPUs, preferring a set that are each other's NVLink peers (greedy from each start)."""
    if k >= len(gpus):
        return list(gpus)
    if k == 1:
        return [gpus[0]]
    ids = {g.id for g in gpus}
    peers = {g.id: set(g.nvlink_peers) & ids for g in gpus}
    if all(len(p) == len(ids) - 1 for p in peers.values()):
        return sorted(gpus[:k], key=lambda g: g.id)  # one NVLink domain: any k are peers
    order = {g.id: i for i, g in enumerate(gpus)}
    best: list[GPU] = []
    best_links = -1
    for start in gpus:
        chosen = [start]
        chosen_ids = {start.id}
        while len(chosen) < k:
            nxt = max(
                (g for g in gpus if g.id not in chosen_ids),
                key=lambda g: (len(peers[g.id] & chosen_ids), -order[g.id]),
            )
            chosen.append(nxt)
            chosen_ids.add(nxt.id)
        links = sum(len(peers[g.id] & chosen_ids) for g in chosen)
        if links > best_links:
            best, best_links = chosen, links
        if links == k * (k - 1):
            break
    return sorted(best, key=lambda g: g.id)


# ---------------------------------------------------------------- scorers


def bin_packing(shards: int, node: NodeState, picked: list[str]) -> float:
    """How full the node would be: fill nodes in use before empty ones (single-node only)."""
    if node.total_units == 0 or shards > 1:
        return 0.0
    return (node.used_units + len(picked)) / node.total_units


def nvlink_locality(node: NodeState, picked: list[str]) -> float:
    """The share of the picked GPUs' possible NVLink pairs that are linked."""
    k = len(picked)
    if k < 2:
        return 0.0
    chosen = set(picked)
    links = sum(len(set(g.nvlink_peers) & chosen) for g in node.node.gpus if g.id in chosen)
    return links / (k * (k - 1))


def spread(model: str, node: NodeState, weight: float) -> float:
    """Less for each replica of the model already on the node (up to MAX_SPREAD)."""
    return -weight * min(node.per_model.get(model, 0), MAX_SPREAD)


def builtin_scores(
    shards: int, model: str, node: NodeState, picked: list[str], spread_weight: float
) -> float:
    """The three built-in scorers' sum, added in their order from 0.0 as the placer adds the
    scorers' answers: the same float as asking each."""
    total = 0.0
    total += bin_packing(shards, node, picked)
    total += nvlink_locality(node, picked)
    total += spread(model, node, spread_weight)
    return total
