"""Placing one replica: quota check, filters per node, scorers, best node(s) per profile.

Nodes are visited tightest fit first (the inventory's index, smallest free count that suffices
upward, skipping node kinds the static filters refuse) and only the first `limit` feasible
ones are scored, as Nomad's LimitIterator does: the best-scored among the best-fitting few.
Nomad scores 2 nodes for batch jobs and log2(n) for services; half of log2(n), at least 3,
kept the placement quality of bench/quality.py. Static verdicts: see verdicts.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from scheduler.core.chain import Chain
from scheduler.core.explain import refusal_counts
from scheduler.core.inventory import Inventory, NodeState, profile_need
from scheduler.core.locality import Costs, apart, colocated
from scheduler.core.models import Model, Node, Profile, ProfileTrial, Settings, Shard
from scheduler.core.plugins import (
    Choice,
    Filter,
    PlaceContext,
    Reason,
    Scorer,
    memory_suffices,
    model_matches,
)
from scheduler.core.reasons import Refusals, explained, sentence
from scheduler.core.verdicts import Key, Verdict, profile_key, verdict_cache
from scheduler.core.warmth import Warmth

MIN_LIMIT = 3  # feasible nodes scored per shard search, at least
WARM_SCAN = 8  # warm nodes looked at beyond the walk's, per placement (rule W1)


# Plain classes, not dataclasses: compiled, a dataclass's generated __init__ runs as Python.
class Placement:
    def __init__(self, profile: Profile, shards: list[Shard]) -> None:
        self.profile = profile
        self.shards = shards


class Outcome:
    def __init__(self, placement: Placement | None) -> None:
        self.placement = placement
        self.trials: list[ProfileTrial] = []
        self.notes: list[str] = []


class Failure:
    """A profile that found too few feasible nodes, for preemption trials to start from."""

    def __init__(
        self,
        version: int,
        feasible: list[str],
        quota_blocked: bool,
        refused: Refusals | None = None,
        apart: tuple[int, str] | None = None,
    ) -> None:
        self.version = version  # the inventory version it was found at
        self.feasible = feasible  # the nodes that did pass (fewer than the shards wanted)
        self.quota_blocked = quota_blocked
        # Nodes the walk visited that passed the static filters and still said no, by reason:
        # counted as the walk went (as Nomad's metrics count filtered nodes), for the pending
        # sentence; the nodes it never visited are counted by explain.py.
        self.refused = Refusals() if refused is None else refused
        self.apart = apart  # `required` locality: feasible nodes, why no group holds all


class Placer:
    """The filter and score chain for one pass, with what it learns along the way."""

    def __init__(
        self,
        filters: list[Filter],
        scorers: list[Scorer],
        n_nodes: int,
        extra: Sequence[Filter] = (),
        settings: Settings | None = None,
        warmth: Warmth | None = None,
    ) -> None:
        """`filters`: the built-in ones and then the `extra` ones (already in `filters`)."""
        settings = settings or Settings()
        self.topology_key = settings.topology_key
        self.costs = Costs(settings)
        self.static = [f for f in filters if f.static]
        self.chain = Chain(filters, scorers)  # the dynamic filters and the scorers
        self.warmth = warmth or Warmth()  # where models' weights are cached
        self.limit = max(MIN_LIMIT, math.ceil(math.log2(max(n_nodes, 2)) / 2))
        extra_static = [f for f in extra if f.static]
        self._narrow_by_id = bool(extra_static)  # else the narrowing goes by GPU kind
        # What the static filters read of a profile (profile_key) and of a node (the cache).
        self.cache, self._fields = verdict_cache(self.static, extra_static)
        # (model, profile) -> its last failure to place: where preemption trials start from.
        self.failures: dict[tuple[str, str], Failure] = {}
        # Profile key -> the node kinds its static filters accept (see _walk).
        self._kinds: dict[Key, frozenset[int]] = {}

    # ------------------------------------------------------------ one node

    def _key(self, model: Model, profile: Profile) -> Key:
        return profile_key(model, profile, self._fields)

    def _walk(self, ctx: PlaceContext, inv: Inventory) -> Iterator[str]:
        """The index walk for a profile, skipping node kinds its static filters refuse. Not
        with an extra static filter (alike nodes may differ then)."""
        key = self._key(ctx.model, ctx.profile)
        if key not in self._kinds and not self._narrow_by_id:
            verdict, m, p = self.cache.verdict, ctx.model, ctx.profile
            self._kinds[key] = inv.kinds_accepted(lambda ns: verdict(m, p, ns, key).reason is None)
        return inv.candidate_nodes(ctx.profile, self._kinds.get(key))

    def _dynamic(
        self, ctx: PlaceContext, ns: NodeState, verdict: Verdict
    ) -> tuple[Reason | None, Choice | None]:
        """The chain on one node whose static verdict passed, on the free GPUs the static
        filters left: which filter says no (and why), or the devices still in the running.
        The walks that place and the explanations ask this one function."""
        said, ids, kinds = verdict
        if said is not None:
            return said, None
        gpus = ns.free_gpus
        if ids is not None:
            gpus = [g for g in gpus if g.id in ids]
        elif kinds is not None:
            gpus = [g for g in gpus if (g.model, g.memory_gb) in kinds]
        return self.chain.check(ctx, ns, gpus)

    def reach(self, model: Model, inv: Inventory) -> int:
        """Healthy devices on eligible nodes that the model's first profile could ever use, by
        GPU model and memory (or MIG profile): the fewer, the sooner it should pick, before
        others take what only it can use. An ordering hint, so extra filters are not asked."""
        profile = model.profiles[0]
        if profile.mig_profile is not None:
            return inv.facts.slice_kinds.get(profile.mig_profile, 0)
        key = self._key(model, profile)
        cached = self.cache.reach.get(key)
        if cached is None:
            cached = self.cache.reach[key] = sum(
                n
                for (gpu_model, memory), n in inv.facts.gpu_kinds.items()
                if model_matches(profile, gpu_model) and memory_suffices(profile, memory)
            )
        return cached

    # ------------------------------------------------------------ one profile

    def _feasible(
        self,
        ctx: PlaceContext,
        inv: Inventory,
        node_ids: Iterator[str] | list[str],
        want: int,
        refused: Refusals | None = None,
    ) -> list[tuple[str, Choice]]:
        """The first `want` nodes that can hold one shard; with `refused`, the others' dynamic
        reasons counted on the way (a counter per no: the explanation costs no walk of its own)."""
        key = self._key(ctx.model, ctx.profile)
        verdicts = self.cache.of_node(key)
        found: list[tuple[str, Choice]] = []
        nodes = inv.nodes
        for nid in node_ids:
            # The static verdict inline: most nodes a walk visits end here.
            verdict = verdicts.get(nid)
            if verdict is None:
                verdict = verdicts[nid] = self.cache.verdict(
                    ctx.model, ctx.profile, nodes[nid], key
                )
            if verdict[0] is not None:
                continue
            said, choice = self._dynamic(ctx, nodes[nid], verdict)
            if choice is not None:
                found.append((nid, choice))
                if len(found) == want:
                    break
            elif refused is not None and said is not None:
                refused.add(nid, said)
        return found

    def place_profile(
        self, model: Model, profile: Profile, inv: Inventory
    ) -> tuple[Placement | None, ProfileTrial, str]:
        """The best placement of one profile, or why not (quota; else counted by place())."""
        ctx = PlaceContext(model, profile)
        block = inv.quota_block(model.owner, profile_need(profile))
        if block is not None:
            self.failures[(model.name, profile.name)] = Failure(inv.version, [], True)
            return None, ProfileTrial(profile=profile.name, note=block), block
        want = self.limit + profile.shards - 1
        refused = Refusals()
        fits = self._feasible(ctx, inv, self._walk(ctx, inv), want, refused)
        spread = None
        if len(fits) == want and profile.shards == 1:
            fits += self._warm(ctx, inv, fits)
        if profile.shards > 1 and profile.locality != "none" and len(fits) >= profile.shards:
            fits, spread = self._local(ctx, inv, fits, refused)
        if len(fits) >= profile.shards:
            scored = sorted(
                (
                    (-self.chain.score(ctx, inv.nodes[nid], ch), i, nid, ch)
                    for i, (nid, ch) in enumerate(fits)
                ),
                key=lambda t: (t[0], t[1]),
            )
            shards = [Shard(node=nid, gpus=ch.picked) for _, _, nid, ch in scored[: profile.shards]]
            return Placement(profile, shards), ProfileTrial(profile=profile.name), ""
        self.failures[(model.name, profile.name)] = Failure(
            inv.version, [nid for nid, _ in fits], False, refused, spread
        )
        n_fits, words = spread or (len(fits), None)
        return None, ProfileTrial(profile=profile.name), sentence(profile, n_fits, {}, words)

    def _warm(
        self, ctx: PlaceContext, inv: Inventory, fits: list[tuple[str, Choice]]
    ) -> list[tuple[str, Choice]]:
        """Feasible warm nodes the walk stopped short of (rule W1), to be scored beside the
        tightest fits: the first WARM_SCAN nodes holding the model's revision, in node order."""
        warm = self.warmth.warm_nodes(ctx.model)
        if not warm:
            return []
        seen = [nid for nid, _ in fits]  # a few: a list is cheaper than a set
        nodes, need = inv.nodes, ctx.profile.gpus
        whole = ctx.profile.mig_profile is None
        # A node with fewer free GPUs than a shard takes, gpu-count refuses: not asked.
        rest = [
            nid
            for nid in warm[:WARM_SCAN]
            if nid not in seen and nid in nodes and (not whole or len(nodes[nid].free_gpus) >= need)
        ]
        return self._feasible(ctx, inv, rest, len(rest)) if rest else []

    def _local(
        self,
        ctx: PlaceContext,
        inv: Inventory,
        fits: list[tuple[str, Choice]],
        refused: Refusals,
    ) -> tuple[list[tuple[str, Choice]], tuple[int, str] | None]:
        """The feasible nodes of one datacenter (and topology group) that can hold every
        shard. The first few nodes of the walk usually are; else the whole fleet is looked at
        (`refused` counted again by that walk, which visits every node the first did). With
        `required` locality and no such group: none, and the feasible nodes' count and why."""
        p = ctx.profile

        def node_of(nid: str) -> Node:
            return inv.nodes[nid].node

        # One topology group among the first few: the common case, nothing more to walk.
        group = colocated(fits, node_of, p.shards, self.topology_key, True)
        if group is not None:
            return group, None
        refused.clear()
        every = self._feasible(ctx, inv, self._walk(ctx, inv), len(inv.nodes), refused)
        required = p.locality == "required"
        group = colocated(every, node_of, p.shards, self.topology_key, required)
        if group is None and required:
            return [], (len(every), apart(every, node_of, p.shards, self.topology_key))
        return (fits if group is None else group[: self.limit + p.shards - 1]), None

    def cost(self, placement: Placement, inv: Inventory) -> float:
        nodes = inv.nodes
        return self.costs.of(
            placement.shards, lambda nid: nodes[nid].node if nid in nodes else None
        )

    def fits(self, model: Model, inv: Inventory, base_version: int, touched: set[str]) -> bool:
        """Whether some profile of the model fits in a trial inventory: a clone of the one at
        `base_version` with replicas given back on the `touched` nodes."""
        for profile in model.profiles:
            if inv.quota_block(model.owner, profile_need(profile)) is not None:
                continue
            ctx = PlaceContext(model, profile)
            before = self.failures.get((model.name, profile.name))
            if before is None or before.quota_blocked or before.version != base_version:
                found = self._feasible(ctx, inv, self._walk(ctx, inv), profile.shards)
                if len(found) >= profile.shards:
                    return True
                continue
            # Untouched nodes are as they were when the profile failed: only the touched ones
            # can have changed their answer.
            others = [nid for nid in before.feasible if nid not in touched]
            if len(others) >= profile.shards:
                return True
            found = self._feasible(ctx, inv, sorted(touched), profile.shards - len(others))
            if len(others) + len(found) >= profile.shards:
                return True
        return False

    def feasible_nodes(self, model: Model, profile: Profile, inv: Inventory) -> list[str]:
        """Nodes that could hold one shard of the profile now (quota aside): where a victim
        search need not make room."""
        before = self.failures.get((model.name, profile.name))
        if before is not None and not before.quota_blocked and before.version == inv.version:
            return list(before.feasible)
        ctx = PlaceContext(model, profile)
        return [nid for nid, _ in self._feasible(ctx, inv, self._walk(ctx, inv), 10**9)]

    def could_hold(self, model: Model, profile: Profile, ns: NodeState) -> bool:
        """Whether the node passes the static filters for the profile (whatever is free)."""
        key = self._key(model, profile)
        return self.cache.node_verdict(model, profile, ns, key).reason is None

    def preemption_could_help(
        self, model: Model, profile: Profile, ns: NodeState, version: int
    ) -> bool:
        """Whether the node's "no" to the profile is one preemption could change, by the
        filters' own status: its static verdict's, then the chain's as the placing walk on
        inventory `version` recorded it (a node it did not record: unschedulable)."""
        said = self.cache.node_verdict(model, profile, ns, self._key(model, profile)).reason
        if said is not None:
            return not said.unresolvable
        # Rule W2's "no" stands whatever is stopped, though the walk may have met an earlier
        # filter's (no free GPU) first on the node.
        if self.warmth.lacks_room(model, ns.node):
            return False
        failure = self.failures.get((model.name, profile.name))
        if failure is None or failure.version != version:
            return True
        return ns.node.id not in failure.refused.never

    def shard_fits(self, model: Model, profile: Profile, inv: Inventory, node_id: str) -> bool:
        """Whether one shard of the profile fits on this node of the inventory."""
        return bool(self._feasible(PlaceContext(model, profile), inv, [node_id], 1))

    # ------------------------------------------------------------ one model

    def place(self, model: Model, inv: Inventory, explain: bool = True) -> Outcome:
        """First profile (in listed order) with a feasible placement; the best scored within.
        Why each profile fell short is worked out only once none fits (then nothing changed)."""
        out = Outcome(None)
        tried: list[tuple[Profile, ProfileTrial, str]] = []
        cheapest: tuple[float, int, Placement] | None = None
        for i, profile in enumerate(model.profiles):
            placement, trial, note = self.place_profile(model, profile, inv)
            if placement is not None and model.placement == "cheapest":
                # Every profile is tried, each GPU type it allows on its own; the cheapest
                # that fits wins, listed order on a tie.
                found: list[Placement] = [placement]
                failure = self.failures.get((model.name, profile.name))
                for variant in self.costs.variants(profile):
                    narrowed = self.place_profile(model, variant, inv)[0]
                    if narrowed is not None:
                        found.append(Placement(profile, narrowed.shards))
                # A variant's failure is not the profile's (preemption trials read it).
                if failure is not None:
                    self.failures[(model.name, profile.name)] = failure
                else:
                    self.failures.pop((model.name, profile.name), None)
                for option in found:
                    price = self.cost(option, inv)
                    if cheapest is None or price < cheapest[0]:
                        cheapest = (price, i, option)
                continue
            if placement is not None:
                out.placement = placement
                return out
            tried.append((profile, trial, note))
        if cheapest is not None:
            out.placement = cheapest[2]
            return out
        for profile, trial, note in tried:
            if explain and trial.note is None:  # not a quota: say which nodes lacked what
                failure = self.failures[(model.name, profile.name)]
                ctx = PlaceContext(model, profile)
                said = refusal_counts(
                    self.cache, self.chain, self._key(model, profile), ctx, inv, failure.refused
                )
                n_fits, words = failure.apart or (len(failure.feasible), None)
                trial, note = explained(profile, n_fits, said, words)
            out.trials.append(trial)
            out.notes.append(note)
        return out


def commit(model: Model, placement: Placement, inv: Inventory) -> None:
    for sh in placement.shards:
        inv.take(model, placement.profile, sh.node, sh.gpus)
    inv.charge(model.owner, profile_need(placement.profile))
