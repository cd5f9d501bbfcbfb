"""Where the shards of a multi-node replica may go together, and what a placement costs.

Locality: shards of one replica talk over NCCL at every layer, so they belong in one
datacenter, and better in one topology group (a rack: node meta `settings.topology_key`).
Cost: a per-GPU price by GPU model name (settings.gpu_costs, matched by substring as
`gpu_models` is), for models that ask for the cheapest feasible profile, as llm-d's variant
autoscaler picks the cheapest accelerator that serves the load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from scheduler.core.models import Node, Profile, Settings, Shard

T = TypeVar("T")


def colocated(
    fits: list[tuple[str, T]],
    node_of: Callable[[str], Node],
    shards: int,
    topology_key: str,
    required: bool,
) -> list[tuple[str, T]] | None:
    """The feasible nodes of the first group that can hold every shard: one datacenter and
    topology group first, then (unless required) one datacenter. None when no group can.
    Groups are taken in the order their first node comes in `fits` (the walk's order)."""
    tiers: list[Callable[[Node], tuple[str, ...]]] = [
        lambda n: (n.datacenter, n.meta.get(topology_key, "")),
    ]
    if not required:
        tiers.append(lambda n: (n.datacenter,))
    for key in tiers:
        groups: dict[tuple[str, ...], list[tuple[str, T]]] = {}
        for item in fits:
            groups.setdefault(key(node_of(item[0])), []).append(item)
        for members in groups.values():
            if len(members) >= shards:
                return members
    return None


def apart(
    fits: list[tuple[str, T]], node_of: Callable[[str], Node], shards: int, topology_key: str
) -> str:
    """Why `required` locality found no group although `fits` (every feasible node) holds
    enough nodes: how many one datacenter has at most, or, where one has enough, how many
    one topology group (`topology_key`) of a datacenter has at most."""
    by_dc: dict[str, int] = {}
    by_group: dict[tuple[str, str], int] = {}
    for nid, _ in fits:
        n = node_of(nid)
        by_dc[n.datacenter] = by_dc.get(n.datacenter, 0) + 1
        group = (n.datacenter, n.meta.get(topology_key, ""))
        by_group[group] = by_group.get(group, 0) + 1
    most_dc = max(by_dc.values(), default=0)
    where = "datacenter"
    most = most_dc
    if most_dc >= shards:
        where, most = f"{topology_key} of a datacenter", max(by_group.values(), default=0)
    needs = f"`locality: required` puts all {shards} shards"
    return f"but no more than {most} in one {where}, where {needs}"


def spans(shards: list[Shard], node_of: Callable[[str], Node | None], topology_key: str) -> int:
    """How many (datacenter, topology group) pairs a placement's shards are spread over."""
    groups = set()
    for sh in shards:
        n = node_of(sh.node)
        groups.add((n.datacenter, n.meta.get(topology_key, "")) if n else ("?", sh.node))
    return len(groups)


class Costs:
    """Price of devices for one pass's settings; per GPU model name, worked out once."""

    def __init__(self, settings: Settings) -> None:
        self.table = sorted(settings.gpu_costs.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        self.default = settings.default_gpu_cost
        # A plain dict, not functools.cache over a bound method: that is a reference cycle,
        # and a pass that leaves one is freed only by the cyclic collector
        # (tests/core/test_pass_garbage.py).
        self._prices: dict[str, float] = {}

    def gpu(self, gpu_model: str) -> float:
        price = self._prices.get(gpu_model)
        if price is None:
            price = self._prices[gpu_model] = self._price(gpu_model)
        return price

    def _price(self, gpu_model: str) -> float:
        for key, price in self.table:  # longest key first: "H100 NVL" before "H100"
            if key in gpu_model:
                return price
        return self.default

    def of(self, shards: list[Shard], node_of: Callable[[str], Node | None]) -> float:
        """What the devices of a placement cost: whole GPUs at their price, a MIG slice at its
        share of its GPU's memory."""
        total = 0.0
        for sh in shards:
            node = node_of(sh.node)
            if node is None:
                continue
            wanted = set(sh.gpus)
            for g in node.gpus:
                if g.id in wanted:
                    total += self.gpu(g.model)
                for s in g.mig or []:
                    if s.id in wanted and g.memory_gb:
                        total += self.gpu(g.model) * min(1.0, s.memory_gb / g.memory_gb)
        return total

    def variants(self, p: Profile) -> list[Profile]:
        """The profile narrowed to each GPU type it allows, so the cheapest type is found
        even where bin-packing would pick a dearer one first: per listed `gpu_models` entry,
        or per priced type when it allows any; none for a MIG profile or a single type."""
        if p.is_mig:
            return []
        types = p.gpu_models if p.gpu_models is not None else [k for k, _ in self.table]
        if len(types) < 2 and p.gpu_models is not None:
            return []
        return [p.model_copy(update={"gpu_models": [t]}) for t in types]
