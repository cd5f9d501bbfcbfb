"""Why a profile did not fit on the nodes no placing walk visited: their static refusals and,
for the nodes the index skips for capacity, the chain's checks up to capacity. The walk that
places counts the nodes it visits itself (placement.Placer._feasible); this counts the rest,
once per profile shape, then kept up to date from the inventory's log of changed nodes."""

from __future__ import annotations

from scheduler.core.chain import Chain
from scheduler.core.inventory import Inventory, NodeState
from scheduler.core.plugins import PlaceContext, Reason
from scheduler.core.reasons import Refusals
from scheduler.core.verdicts import Explained, Key, Verdict, VerdictCache


def unvisited(chain: Chain, ctx: PlaceContext, ns: NodeState, verdict: Verdict) -> Reason | None:
    """Why a node that no walk for the profile visits cannot hold a shard: its static
    refusal, or, for a node the index skips (too few free GPUs, no free slice of the MIG
    profile), the chain's checks up to capacity. None: a walk visits it and counts it."""
    if verdict[0] is not None:
        return verdict[0]
    p = ctx.profile
    if p.mig_profile is not None:
        offered = bool(ns.free_slices.get(p.mig_profile))
    else:
        offered = 0 < len(ns.free_gpus) >= p.gpus  # the index files no node with none free
    return None if offered else chain.exhausted(ctx, ns)


def refusal_counts(
    cache: VerdictCache,
    chain: Chain,
    vkey: Key,
    ctx: PlaceContext,
    inv: Inventory,
    refused: Refusals,
) -> dict[Reason, int]:
    """How many nodes said no for which reason: those the walk visited (`refused`, its
    counts) and those it never did (static refusals, nodes the index skips). The latter
    worked out once per profile shape and then kept up to date from the inventory's log
    of changed nodes, not redone per model. `vkey`: the profile's key for static verdicts."""
    key = (*vkey, ctx.profile.cpu_cores, ctx.profile.memory_gb)
    seen = cache.explained.get(key)
    if seen is None or seen.inv is not inv:
        seen = cache.explained[key] = Explained(inv, inv.version, {}, {})
        for members in cache.shapes(inv):
            verdict = cache.node_verdict(ctx.model, ctx.profile, members[0], vkey)
            if verdict[0] is not None:  # static: the same for every node of the shape
                seen.counts[verdict[0]] = seen.counts.get(verdict[0], 0) + len(members)
                continue
            by_id = verdict.ids is not None  # a narrowing by id holds for its node only
            for member in members:
                ns = inv.nodes[member.node.id]
                if by_id:
                    verdict = cache.node_verdict(ctx.model, ctx.profile, ns, vkey)
                seen.set(ns.node.id, unvisited(chain, ctx, ns, verdict))
    elif seen.version != inv.version:
        for nid in sorted(inv.changed_since(seen.version)):
            if nid in seen.reasons:  # the others failed a static filter
                ns = inv.nodes[nid]
                verdict = cache.node_verdict(ctx.model, ctx.profile, ns, vkey)
                seen.set(nid, unvisited(chain, ctx, ns, verdict))
        seen.version = inv.version
    out = {r: n for r, n in seen.counts.items() if n}
    for r, n in refused.counts.items():
        out[r] = out.get(r, 0) + n
    return out
