"""The victim search (docs/decision-core.md, rules R2-R4): the cheapest set of at most
`max_victims` candidates whose going makes a model fit, per node first (as the Kubernetes
scheduler selects victims on one node), then across nodes; and the sentence each stop gives.
The candidates come from preemption.VictimPool, in tier order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import combinations, islice

from scheduler.core.codes import StopCode
from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.models import Model, Profile, Replica
from scheduler.core.placement import Placer

# In the order they give way (rule R2; TIER_FAIR is rule R7's).
TIERS = 6
(
    TIER_IDLE,
    TIER_BORROWED,
    TIER_LOWER_ABOVE_MIN,
    TIER_SAME_ABOVE_MIN,
    TIER_FAIR,
    TIER_LOWER_MIN,
) = range(TIERS)


class Victim:
    """A possible victim, as one model's candidates offer it. (A plain class: compiled, a
    dataclass is built through its generated __init__, which runs as Python.)"""

    def __init__(
        self,
        replica: Replica,
        model: Model,
        tier: int,
        idle_s: float,
        gpus: float,
        memory_gb: float,
        above_min: bool,
        nodes: tuple[str, ...] = (),
        borrowed_from: str | None = None,
        shard_cpu: float = 0.0,
        shard_mem: float = 0.0,
        toward: str | None = None,
    ) -> None:
        self.replica = replica
        self.model = model
        self.tier = tier
        self.idle_s = idle_s
        self.gpus = gpus
        self.memory_gb = memory_gb
        self.above_min = above_min
        # Every node it has a shard on; a multi-node replica gives way as a whole (one victim).
        self.nodes = nodes
        self.borrowed_from = borrowed_from  # the guaranteed prefix it is borrowed past, if any
        self.shard_cpu = shard_cpu  # CPU cores and memory each of its shards holds
        self.shard_mem = shard_mem
        self.toward = toward  # where the taking owner stands (rule R7's tier), for the sentence
        # Its model cached on no other node: it would start cold elsewhere (rule W4).
        self.cold_elsewhere = False

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1


TIER_NAMES = {
    TIER_IDLE: "idle on demand, of a lower class",
    TIER_LOWER_ABOVE_MIN: "lower class, above its minimum",
    TIER_SAME_ABOVE_MIN: "same class, above its minimum, for a model below its own",
    TIER_LOWER_MIN: "lower class, at its minimum",
}


STOP_CODES: tuple[StopCode, ...] = (  # by tier
    "preempted_idle",
    "preempted_borrowed",
    "preempted_lower_class",
    "preempted_same_class",
    "preempted_fair_share",
    "preempted_lower_minimum",
)


def stop_code(v: Victim) -> StopCode:
    """The tier a victim gave way under, as its stop's code."""
    return STOP_CODES[v.tier]


def stop_reason(v: Victim, preemptor: Model) -> str:
    """The rule and the tier a victim gave way under, in a sentence an operator can check."""
    if v.tier == TIER_BORROWED or v.tier == TIER_FAIR:
        why = (
            f"borrowed past {v.borrowed_from}'s guarantee"
            if v.borrowed_from is not None
            else f"borrowed ({v.model.owner} has no guarantee)"
        )
        if v.tier == TIER_FAIR:
            why += f", reclaimed toward fair share by {v.toward}"
        else:
            why += f", reclaimed within {preemptor.owner}'s guarantee"
    else:
        why = f"{TIER_NAMES[v.tier]} ({v.model.class_} for {preemptor.class_})"
    if v.multi_node:
        why += f"; all {len(v.nodes)} shards as one"
    return f"preempted for {preemptor.name}: {why}"


CostKey = tuple[bool, int, tuple[int, ...], float, float, int, tuple[str, ...]]


def set_cost(victims: Sequence[Victim]) -> CostKey:
    """What a victim set costs, compared in order: a multi-node replica only when nothing
    cheaper makes room; fewer victims; the lowest tiers (the worst one first); fewer GPUs
    lost; longest idle; fewer whose model is cached on no other node (rule W4); then by id
    (so equal sets always resolve the same way)."""
    return (
        any(v.multi_node for v in victims),
        len(victims),
        tuple(sorted((v.tier for v in victims), reverse=True)),
        round(sum(v.gpus for v in victims), 6),
        -sum(min(v.idle_s, 1e9) for v in victims),
        sum(1 for v in victims if v.cold_elsewhere),
        tuple(sorted(v.replica.id for v in victims)),
    )


# Past this many candidates on one node, combinations give way to the Kubernetes reprieve.
_EXACT_UP_TO = 10


def _released(inv: Inventory, victims: Sequence[Victim]) -> tuple[Inventory, set[str]]:
    trial = inv.clone()
    touched: set[str] = set()
    for v in victims:
        touched.update(trial.release(v.replica.id))
    return trial, touched


def _on_node(
    ok: Callable[[Sequence[Victim]], bool],
    cands: list[Victim],
    limit: int,
    bound: CostKey | None,
    over: list[int] | None = None,
) -> list[Victim] | None:
    """The cheapest set of this node's candidates that makes room on it, within `limit` and
    cheaper than `bound`. As the Kubernetes scheduler selects victims on one node: if even
    all of them do not make room, none will; else the smallest set that does."""
    if not ok(cands):
        return None
    if len(cands) > limit and over is not None:
        over.append(len(cands))  # room can be made here, if perhaps only past the limit
    if len(cands) > _EXACT_UP_TO:
        # Reprieve: with all gone, add back the dearest first while the room stays.
        kept = list(cands)
        for v in sorted(cands, key=lambda v: set_cost([v]), reverse=True):
            fewer = [w for w in kept if w is not v]
            if ok(fewer):
                kept = fewer
        if len(kept) > limit or (bound is not None and set_cost(kept) >= bound):
            return None
        return kept
    found: list[Victim] | None = None
    for k in range(1, min(limit, len(cands)) + 1):
        if bound is not None and k > bound[1] and not bound[0]:
            break  # a set without a multi-node replica and fewer victims is found already
        for combo in sorted(combinations(cands, k), key=set_cost):
            cost = set_cost(combo)
            if bound is not None and cost >= bound:
                break
            if ok(combo):
                found, bound = list(combo), cost
                break
    return found


# How many candidates (in tier order) a victim search looks at: the search is exact on
# them; on a large fleet the first ones are the cheapest tiers anyway. Bounds a pass's time.
POOL_CAP = 24


def _room_possible(
    m: Model, profile: Profile, inv: Inventory, nid: str, held: list[float], placer: Placer
) -> bool:
    """A quick necessary condition before any trial: no filter said preemption cannot help
    on the node (unresolvable), and its free room plus all its candidates' (`held`: GPUs,
    CPU, memory) would hold a shard."""
    ns = inv.nodes.get(nid)
    if ns is None:
        return False
    if ns.free_cpu + held[1] + 1e-9 < profile.cpu_cores:
        return False
    if ns.free_mem + held[2] + 1e-9 < profile.memory_gb:
        return False
    if not profile.is_mig and len(ns.free_gpus) + held[0] < profile.gpus:
        return False
    return placer.preemption_could_help(m, profile, ns, inv.version)


def choose(
    m: Model,
    cands: Iterator[Victim],
    inv: Inventory,
    max_victims: int,
    placer: Placer,
    over: list[int] | None = None,
) -> list[Victim]:
    """The cheapest set of at most `max_victims` candidates whose going makes the model fit
    (set_cost): per node first, as the Kubernetes scheduler does, then as many nodes as a
    multi-node profile still lacks. [] when no set within `max_victims` makes room; then
    `over` gets the sizes of larger sets that would (on one node each)."""
    pool = list(islice(cands, POOL_CAP))
    if not pool or max_victims <= 0:
        return []
    for v in pool:
        v.cold_elsewhere = not placer.warmth.warm_elsewhere(v.model, v.nodes)

    def fits(gone: Sequence[Victim]) -> bool:
        trial, touched = _released(inv, gone)
        return placer.fits(m, trial, inv.version, touched)

    by_node, held = _by_node(pool)
    best: list[Victim] | None = None
    walk = False  # whether the plain walk below may find what the per-node search cannot
    for profile in m.profiles:
        if inv.quota_block(m.owner, profile_need(profile)) is not None:
            walk = True  # room alone will not do: see the walk below
            continue
        walk = walk or profile.shards > 1
        ready = set(placer.feasible_nodes(m, profile, inv))
        lacking = profile.shards - len(ready)
        if lacking <= 0:
            continue
        bound = set_cost(best) if best is not None and lacking == 1 else None
        found = _per_node(
            m, profile, inv, placer, by_node, held, ready, lacking, max_victims, bound, over
        )
        chosen = _combined(found, lacking, max_victims)
        if chosen is not None and fits(chosen):
            picked = _prune(chosen, fits)
            if best is None or set_cost(picked) < set_cost(best):
                best = picked
    if best is None:
        # One multi-node victim frees room on several nodes at once, where per-node sets
        # would each have cost a victim of their own.
        for v in pool:
            if v.multi_node and fits([v]) and (best is None or set_cost([v]) < set_cost(best)):
                best = [v]
    if best is None and walk:
        best = _walk(pool, max_victims, fits)
    return best or []


def _by_node(pool: list[Victim]) -> tuple[dict[str, list[Victim]], dict[str, list[float]]]:
    """The candidates on each node, and what all of them hold there (GPUs, CPU, memory)."""
    by_node: dict[str, list[Victim]] = {}
    held: dict[str, list[float]] = {}
    for v in pool:
        cpu, mem = v.shard_cpu, v.shard_mem
        for sh in v.replica.shards:
            by_node.setdefault(sh.node, []).append(v)
            h = held.get(sh.node)
            if h is None:
                h = held[sh.node] = [0.0, 0.0, 0.0]
            h[0] += len(sh.gpus)
            h[1] += cpu
            h[2] += mem
    return by_node, held


def _per_node(
    m: Model,
    profile: Profile,
    inv: Inventory,
    placer: Placer,
    by_node: dict[str, list[Victim]],
    held: dict[str, list[float]],
    ready: set[str],
    lacking: int,
    max_victims: int,
    bound: CostKey | None,
    over: list[int] | None,
) -> list[tuple[CostKey, list[Victim]]]:
    """The cheapest set on each node not `ready` that would make room for one shard there,
    cheapest first. With one shard lacking, a node is searched only for a set cheaper than
    the best so far (`bound`)."""
    per_node: list[tuple[CostKey, list[Victim]]] = []
    for nid in sorted(by_node):
        if nid in ready or not _room_possible(m, profile, inv, nid, held[nid], placer):
            continue

        def ok(gone: Sequence[Victim], nid: str = nid) -> bool:
            trial, _ = _released(inv, gone)
            return placer.shard_fits(m, profile, trial, nid)

        found = _on_node(ok, by_node[nid], max_victims, bound, over)
        if found is not None:
            per_node.append((set_cost(found), found))
            if lacking == 1:
                bound = per_node[-1][0]
    per_node.sort(key=lambda t: t[0])
    return per_node


def _combined(
    per_node: list[tuple[CostKey, list[Victim]]], lacking: int, max_victims: int
) -> list[Victim] | None:
    """The cheapest nodes' sets together, for as many nodes as are lacking and within
    `max_victims` (None: not enough of them)."""
    chosen: dict[str, Victim] = {}
    got = 0
    for _, found in per_node:
        if got == lacking:
            break
        new = {v.replica.id: v for v in found if v.replica.id not in chosen}
        if len(chosen) + len(new) <= max_victims:
            chosen.update(new)
            got += 1
    return list(chosen.values()) if got == lacking else None


def _prune(chosen: list[Victim], fits: Callable[[Sequence[Victim]], bool]) -> list[Victim]:
    """Spare every victim not needed (the dearest first)."""
    for v in sorted(chosen, key=lambda v: set_cost([v]), reverse=True):
        if len(chosen) == 1:
            break
        fewer = [w for w in chosen if w is not v]
        if fits(fewer):
            chosen = fewer
    return chosen


def _walk(
    pool: list[Victim], max_victims: int, fits: Callable[[Sequence[Victim]], bool]
) -> list[Victim]:
    """Candidates in order until the model fits, then every one not needed is spared: for
    room that a quota limit rather than a node lacks (victims of the same owner anywhere)."""
    chosen: list[Victim] = []
    for v in pool:
        if len(chosen) == max_victims:
            break
        chosen.append(v)
        if fits(chosen):
            return _prune(chosen, fits)
    return []
