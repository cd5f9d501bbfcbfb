"""The filter and score chain of a pass: the dynamic filters and the scorers, built-ins first,
then the registered plugins, assembled once per pass (the static filters run once per node
shape: verdicts.py). Every placement visit walks this chain, and the walk that decides is the
walk that explains: a filter's "no" comes back as a Reason (its name, its words, and whether
preemption could help), so no second walk is needed to say why.

The built-in filters and scorers are compiled classes (`Native...`): the chain calls them
natively; a plugin is called through its protocol (plugins.Filter, plugins.Scorer) and its
answer adapted (`reason_of`). Both are links of the same chain, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.builtin_rules import (
    CACHE_FULL,
    CPU_SHORT,
    GPUS_SHORT,
    MEMORY_SHORT,
    bin_packing,
    nvlink_locality,
    pick_gpus,
    spread,
)
from scheduler.core.inventory import NodeState
from scheduler.core.models import GPU, Model, Profile
from scheduler.core.plugins import Choice, Filter, PlaceContext, Reason, Scorer, reason_of
from scheduler.core.warmth import Warmth

# ---------------------------------------------------------------- filters


class NativeFilter:
    """A dynamic filter the chain calls natively: `check` says why the node cannot hold one
    shard now (a Reason), or None. `usable`: how many free GPUs survived the narrowing. This
    base refuses nothing; each built-in says what it checks."""

    name = ""
    static = False

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        return None

    def filter(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> str | None:
        """The plugin protocol (plugins.Filter), for whoever asks it as one."""
        said = self.check(ctx, node, choice, len(choice.gpus))
        return None if said is None else said.text


class NodeResources(NativeFilter):
    name = "node-resources"

    def __init__(self) -> None:
        self.cpu = Reason(self.name, CPU_SHORT)
        self.memory = Reason(self.name, MEMORY_SHORT)

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        p = ctx.profile
        if ns.free_cpu + 1e-9 < p.cpu_cores:
            return self.cpu
        if ns.free_mem + 1e-9 < p.memory_gb:
            return self.memory
        return None


class MigProfile(NativeFilter):
    name = "mig-profile"

    def __init__(self) -> None:
        self.said: dict[str, Reason] = {}  # by MIG profile: its sentence, made once

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        mig = ctx.profile.mig_profile
        if mig is None:
            return None
        free = ns.free_slices.get(mig)
        if not free:
            said = self.said.get(mig)
            if said is None:
                said = self.said[mig] = Reason(self.name, f"no free {mig} slice")
            return said
        if choice is not None:
            choice.slice = free[0]
        return None


class GPUCount(NativeFilter):
    name = "gpu-count"

    def __init__(self) -> None:
        self.short = Reason(self.name, GPUS_SHORT)

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        p = ctx.profile
        if p.mig_profile is None and usable < p.gpus:
            return self.short
        return None


class CacheRoom(NativeFilter):
    """A cold node whose model cache reports too little free room for the model's weights
    (rule W2): the download would fail there. Unresolvable: stopping replicas frees no cache
    room (nothing in the core deletes weights). Unknown sizes never say no."""

    name = "model-cache-room"

    def __init__(self, warmth: Warmth) -> None:
        self.warmth = warmth
        self.full = Reason(self.name, CACHE_FULL, True)
        # The model a walk asks about and its weight size: a walk asks of one model per node.
        self.model: Model | None = None
        self.need: int | None = None

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        node = ns.node
        cache = node.cache
        if cache is None:
            return None
        free = cache.free_bytes
        if free is None:
            return None
        m = ctx.model
        if m is not self.model:
            self.model, self.need = m, self.warmth.weight_bytes(m)
        need = self.need
        if need is None or need <= free or self.warmth.is_warm(m, node.id):
            return None
        return self.full


class PluginFilter(NativeFilter):
    """A registered dynamic filter, asked through its protocol on the chain's Choice."""

    def __init__(self, inner: Filter) -> None:
        self.inner = inner
        self.name = inner.name

    def check(
        self, ctx: PlaceContext, ns: NodeState, choice: Choice | None, usable: int
    ) -> Reason | None:
        assert choice is not None  # the chain makes one before the first plugin
        return reason_of(self.name, self.inner.filter(ctx, ns, choice), static=False)


# ---------------------------------------------------------------- scorers


class NativeScorer:
    """A scorer the chain calls natively (higher is better). This base prefers no node."""

    name = ""

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        return 0.0

    def score(self, ctx: PlaceContext, node: NodeState, choice: Choice) -> float:
        """The plugin protocol (plugins.Scorer), for whoever asks it as one."""
        return self.rank(ctx, node, choice)


class BinPacking(NativeScorer):
    """Fill nodes already in use before empty ones: keeps whole nodes free for big shards.
    Not for multi-node replicas, which take the roomiest nodes (see candidate_nodes)."""

    name = "bin-packing"

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        return bin_packing(ctx.profile.shards, ns, choice.picked)


class NVLinkLocality(NativeScorer):
    name = "nvlink-locality"

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        return nvlink_locality(ns, choice.picked)


class SpreadReplicas(NativeScorer):
    """One replica of a model per node where possible, so one node's loss costs one replica.
    Weighed below bin-packing: it breaks ties between equally full nodes, it does not leave
    holes that a larger model would have needed."""

    name = "spread"

    def __init__(self, weight: float = 0.1) -> None:
        self.weight = weight

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        return spread(ctx.model.name, ns, self.weight)


class WarmCache(NativeScorer):
    """A node whose model cache holds the model's revision (rule W1): it serves after a load
    from local disk, not a download. It scores the share of a cold start's expected time that
    it saves (warmth.warm_saving), so it wins against a cold node whose packing score is at
    most that much higher: the larger the weights, the more packing a warm start may cost."""

    name = "warm-cache"

    def __init__(self, warmth: Warmth) -> None:
        self.warmth = warmth
        # The model last scored, its warm nodes and what they save it.
        self.model: Model | None = None
        self.warm: frozenset[str] = frozenset()
        self.saving = 0.0

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        m = ctx.model
        if m is not self.model:
            self.model, self.warm = m, self.warmth.warm_set(m)
            self.saving = self.warmth.saving(m) if self.warm else 0.0
        return self.saving if self.warm and ns.node.id in self.warm else 0.0


class PluginScorer(NativeScorer):
    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.name = inner.name

    def rank(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        return self.inner.score(ctx, ns, choice)


# ---------------------------------------------------------------- the chain


class Chain:
    """The dynamic filters and the scorers of one pass, in order: built-ins, then plugins."""

    def __init__(self, filters: Sequence[Filter], scorers: Sequence[Scorer]) -> None:
        self.filters: list[NativeFilter] = [
            f if isinstance(f, NativeFilter) else PluginFilter(f) for f in filters if not f.static
        ]
        self.scorers: list[NativeScorer] = [
            s if isinstance(s, NativeScorer) else PluginScorer(s) for s in scorers
        ]
        # A plugin narrows a Choice and may read what the built-ins put in it (the MIG
        # slice): with one configured, every visit walks with a Choice from the start.
        self.with_choice = any(isinstance(f, PluginFilter) for f in self.filters)

    def check(
        self, ctx: PlaceContext, ns: NodeState, gpus: list[GPU]
    ) -> tuple[Reason | None, Choice | None]:
        """Why the node cannot hold one shard now (the first filter that says no), or the
        devices still in the running there."""
        choice = Choice(gpus=gpus) if self.with_choice else None
        usable = len(gpus)
        for f in self.filters:
            said = f.check(ctx, ns, choice, usable if choice is None else len(choice.gpus))
            if said is not None:
                return said, None
        if choice is None:
            choice = Choice(gpus=gpus)
            mig = ctx.profile.mig_profile
            if mig is not None:
                choice.slice = ns.free_slices[mig][0]
        return None, choice

    def exhausted(self, ctx: PlaceContext, ns: NodeState) -> Reason | None:
        """Why a node the index skips for capacity (too few free GPUs, no free slice of the
        MIG profile) cannot hold a shard: the filters in chain order up to the capacity
        checks, which say no there, so a walk need not visit it to know. Plugins come after
        the built-ins and are never reached."""
        usable = len(ns.free_gpus)
        for f in self.filters:
            if isinstance(f, PluginFilter):
                break
            said = f.check(ctx, ns, None, usable)
            if said is not None:
                return said
        return None

    def score(self, ctx: PlaceContext, ns: NodeState, choice: Choice) -> float:
        """The devices picked on the node, and the scorers' sum (in their order, from 0.0)."""
        p: Profile = ctx.profile
        if p.mig_profile is not None:
            assert choice.slice is not None
            choice.picked = [choice.slice.id]
        else:
            choice.picked = [g.id for g in pick_gpus(choice.gpus, p.gpus)]
        total = 0.0
        for s in self.scorers:
            total += s.rank(ctx, ns, choice)
        return total
