"""What the built-in filters say and the built-in scorers compute, compiled with the core:
the chain's native filters and scorers (chain.py) use them."""

from __future__ import annotations

from scheduler.core.inventory import NodeState
from scheduler.core.models import GPU

CPU_SHORT = "too few free CPU cores"
MEMORY_SHORT = "too little free memory"
GPUS_SHORT = "too few free GPUs"
CACHE_FULL = "no room in the model cache for the weights"
MAX_SPREAD = 5  # replicas of a model on one node beyond which spreading no longer counts


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
