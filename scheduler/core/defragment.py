"""Defragmentation (docs/decision-core.md, "One pass", step 6): a model short of room whose
replica needs several GPUs of one node gets a node freed whole, by moving a few small settled
replicas of steady models elsewhere (make-before-break: their replacements start first, on
free room, tried on a clone with the spot kept for the waiting model).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.core.inventory import Inventory, NodeState, profile_need
from scheduler.core.models import Model, Profile, Replica
from scheduler.core.pass_state import PassState
from scheduler.core.placement import Placement, commit
from scheduler.core.plugins import memory_suffices, model_matches
from scheduler.core.replacement import start_move

Movers = list[tuple[Replica, Model]]  # replicas to move, with their models
MOVES = ("consolidation", "defragmentation")  # the starts consolidate_per_pass counts


def movable(st: PassState, r: Replica) -> Model | None:
    """The model of a replica that may be moved elsewhere (make-before-break) to make room:
    running and settled on one node, of a model that has exactly what it wants, all of it
    running, and that is neither held nor being changed."""
    settle = timedelta(seconds=st.settings.min_lifetime_s)
    if (
        r.state != "running"
        or len(r.shards) != 1
        or r.id in st.ledger.retired
        or r.id in st.ledger.stopped
        or r.ready_at is None
        or r.ready_at + settle > st.now
    ):
        return None
    if r.model not in st.steady:
        st.steady[r.model] = is_steady(st, r.model)
    return st.inv.facts.models[r.model] if st.steady[r.model] else None


def is_steady(st: PassState, name: str) -> bool:
    m = st.inv.facts.models.get(name)
    holds, ledger = st.holds, st.ledger
    if m is None or name in holds.honoured or name in holds.giving_way or name in ledger.rollout:
        return False
    reps = [x for x in st.inv.facts.by_model.get(name, []) if x.counts]
    return len(reps) == st.counts.desired[name] and all(
        x.state == "running" and x.id not in ledger.retired for x in reps
    )


def defragment(st: PassState, waiting: list[Model]) -> None:
    """A model short of room whose replica needs several GPUs of one node: where a node is
    free but for a few small replicas, move those elsewhere (replacements first, on free
    room), so the node frees whole. Shares consolidate_per_pass; a bounded few tries."""
    left = st.settings.consolidate_per_pass - sum(1 for a in st.ledger.starts if a.code in MOVES)
    if left <= 0 or not waiting:
        return
    # One model a pass (scanning the fleet is not free), a different one each turn.
    turn = turn_of(st.now, len(waiting))
    tries = 1
    for m in waiting[turn:] + waiting[:turn]:
        if left <= 0 or tries == 0:
            return
        p = m.profiles[0]
        if p.is_mig or p.shards != 1 or p.gpus < 2 or m.name in st.holds.on_their_way:
            continue
        if any(a.preempted_for == m.name for a in st.ledger.stops):
            continue  # it preempts for its room instead
        if st.inv.quota_block(m.owner, profile_need(p)) is not None:
            continue  # held back by its quota, not by room: moving others would not help
        tries -= 1
        if make_room(st, m, p):
            left -= 1


def make_room(st: PassState, m: Model, p: Profile) -> bool:
    """Free the node that needs the fewest moves for one replica of `m`, if its movers all
    fit elsewhere on free room (their owners' quotas allowing both replicas a while)."""
    best = _fewest_movers(st, m, p)
    if best is None:
        return False
    nid, victims = best
    trial = st.inv.clone()
    for r, _vm in victims:
        trial.release(r.id)
    room = spot(trial.nodes[nid], p)
    if room is None:
        return False
    trial.take(m, p, nid, room)  # the spot is the waiting model's: the others go elsewhere
    # Elsewhere indeed: a replaced replica holds its devices until its replacement runs
    # (make-before-break), so no replacement may land on what is left of this node.
    ns = trial.nodes[nid]
    rest = [g.id for g in ns.free_gpus] + [s.id for v in ns.free_slices.values() for s in v]
    if rest:
        trial.reserve(nid, rest)
    moved = _replacements(st, victims, trial)
    if moved is None:
        return False
    for r, vm, fitted in moved:
        why = f"consolidate: moves {r.id} off {nid} so that {m.name} fits there whole"
        start_move(st, vm, r, fitted, ("defragmentation", why))
        st.ledger.rollout[vm.name] = f"moving {r.id} off {nid} to make room for {m.name}"
    free_now = [d for d in room if st.inv.is_free(nid, d)]
    if free_now:
        st.inv.reserve(nid, free_now)  # kept for the waiting model
    return True


def _replacements(
    st: PassState, victims: Movers, trial: Inventory
) -> list[tuple[Replica, Model, Placement]] | None:
    """Where each mover's replacement goes in `trial`, or None if one does not fit. The
    replacements start before the replicas they replace stop: their owners' quota limits
    must hold with both (make-before-break never passes a limit)."""
    moved: list[tuple[Replica, Model, Placement]] = []
    for r, vm in victims:
        own = vm.profile(r.profile)
        if own is None:
            return None
        one = vm.model_copy(update={"profiles": [own]})
        fitted = st.placer.place(one, trial, explain=False).placement
        if fitted is None:
            return None
        commit(vm, fitted, trial)
        moved.append((r, vm, fitted))
    probe = st.inv.clone()
    for _r, vm, fitted in moved:
        if probe.quota_block(vm.owner, profile_need(fitted.profile)) is not None:
            return None
        commit(vm, fitted, probe)
    return moved


def _fewest_movers(st: PassState, m: Model, p: Profile) -> tuple[str, Movers] | None:
    """The node (in node order) that frees enough usable GPUs for `p` with the fewest movers."""
    kinds_of: dict[int, frozenset[tuple[str, float]]] = {}  # GPU kinds p may use, by node kind
    best: tuple[int, str, Movers] | None = None
    for nid, here in sorted(st.inv.facts.single.items()):  # node order, not listing order
        ns = st.inv.nodes.get(nid)
        if ns is None or not ns.node.eligible or ns.node.draining:
            continue
        if len(ns.free_gpus) + sum(len(r.shards[0].gpus) for r in here) < p.gpus:
            continue  # cheap bound first: not enough even if everything moved
        kinds = kinds_of.get(ns.kind)
        if kinds is None:
            usable = serving_gpus(ns, p, [g.id for g in ns.node.gpus])
            ok = {(g.model, g.memory_gb) for g in ns.node.gpus if g.id in usable}
            kinds = kinds_of[ns.kind] = frozenset(ok if len(usable) >= p.gpus else ())
        if not kinds:
            continue
        free = sum(1 for g in ns.free_gpus if (g.model, g.memory_gb) in kinds)
        if free >= p.gpus:
            continue
        victims = _movers_on(st, m, p, ns, here, free)
        if victims is not None and (best is None or len(victims) < best[0]):
            best = (len(victims), nid, victims)
            if len(victims) == 1:
                break  # cannot do with fewer
    return None if best is None else (best[1], best[2])


def _movers_on(
    st: PassState, m: Model, p: Profile, ns: NodeState, here: list[Replica], free: int
) -> Movers | None:
    """The largest movable replicas on the node that free enough for `p`, or None."""
    victims: Movers = []
    for r in sorted(here, key=lambda r: (-len(r.shards[0].gpus), r.id)):
        gain = len(serving_gpus(ns, p, r.shards[0].gpus))
        if gain == 0:
            continue  # frees nothing the waiting model could use (a MIG slice, say)
        vm = movable(st, r)
        if vm is None or vm.name == m.name:
            continue
        victims.append((r, vm))
        free += gain
        if free >= p.gpus:
            return victims
    return None


# Defragmentation tries one waiting model a pass, another one every TURN_S: a turn per
# minute, not per second, so that a quiet plan stays the same for a while.
TURN_S = 60


def turn_of(now: datetime, waiting: int) -> int:
    """Which of `waiting` models (in their order) defragmentation tries first at `now`."""
    return int(now.timestamp()) // TURN_S % waiting


def next_turn(now: datetime) -> datetime:
    """When the turn changes next (calm.py's threshold for the rotation)."""
    start = int(now.timestamp()) // TURN_S * TURN_S
    return datetime.fromtimestamp(start + TURN_S, tz=now.tzinfo)


def serving_gpus(ns: NodeState, p: Profile, ids: list[str]) -> list[str]:
    """Which of `ids` on a node are whole GPUs the profile could use (model, memory, health)."""
    wanted = set(ids)
    return [
        g.id
        for g in ns.node.gpus
        if g.id in wanted
        and g.mig is None
        and g.healthy
        and model_matches(p, g.model)
        and memory_suffices(p, g.memory_gb)
    ]


def spot(ns: NodeState, p: Profile) -> list[str] | None:
    """The free GPUs a one-shard profile would take on this node now, or None."""
    if ns.free_cpu + 1e-9 < p.cpu_cores or ns.free_mem + 1e-9 < p.memory_gb:
        return None
    free = serving_gpus(ns, p, [g.id for g in ns.free_gpus])
    return free[: p.gpus] if len(free) >= p.gpus else None
