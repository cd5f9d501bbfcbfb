"""Which replicas are replaced make-before-break, besides those on draining nodes.

Rolling update: a replica whose spec (a digest of what it runs, from its job) differs from
what the model would start now, or whose profile the model no longer has. Consolidation: a
running replica on a worse placement than the model could have now (a later profile, or a
dearer one for `placement: cheapest`). Both go through the same replacement as a drain
(replacement.py): the replica stops counting as live, the model grows a replacement, and
the replica is stopped once enough others run. Defragmentation, which moves replicas for a
waiting model the same way, is defragment.py.
"""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.models import Model, Node, Replica
from scheduler.core.pass_state import PassState, StopWhy
from scheduler.core.replacement import mark, replace, retire_one, start_move

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
ROLL: tuple[StopWhy, StopWhy] = (
    ("rolling_update", "rolling update: not serving yet, restarted on the model's new spec"),
    ("rolling_update", "rolling update: replaced by a replica on the model's new spec"),
)
MOVE: tuple[StopWhy, StopWhy] = (
    ("consolidation", "consolidation: not serving yet"),
    ("consolidation", "consolidation: replaced by a replica on a better placement"),
)
STALLED: StopWhy = ("rollout_stalled", "roll-out stopped: its replacement did not start")

NO_PROFILE = 1 << 30  # rank of a replica whose profile the model no longer lists


def stall(st: PassState, m: Model, r: Replica) -> None:
    """A replica on the current spec that did not become ready, while older ones still run:
    the roll-out stops there (the old replicas are kept) until the spec changes again."""
    specs = st.snapshot.specs.get(m.name) or {}
    if not r.spec or specs.get(r.profile) != r.spec:
        return
    reps = [x for x in st.inv.facts.by_model.get(m.name, []) if x.counts]
    if outdated(m, reps, specs):
        st.ledger.stalled[m.name] = r.spec
        st.ledger.rollout[m.name] = (
            f"roll-out stopped: replica {r.id} on the new spec did not become ready "
            f"within {m.load_grace_s}s; the previous replicas are kept"
        )


def renew(st: PassState, m: Model) -> None:
    """Rolling update, and moves to a better placement whose replacement already runs or
    starts. At most settings.rollout_surge replacements start at a time beside the fresh
    replicas still starting; never below the desired count live (make-before-break)."""
    # Replicas of a removed profile are replace_stale's (they no longer count as live).
    current = st.inv.facts.current.get(m.name)
    if not current:
        return
    retired = st.ledger.retired
    counting = [r for r in current if r.id not in retired] if retired else current
    if not counting or _moves_under_way(st, m, counting):
        return
    specs = st.snapshot.specs.get(m.name)
    old = outdated(m, counting, specs)
    failed = st.snapshot.stalled.get(m.name)
    if failed is not None and specs and failed in specs.values():
        _keep_stalled(st, m, counting, old, failed)
    elif old:
        _roll(st, m, counting, old)
    else:
        _drop_worse(st, m, counting)


def _moves_under_way(st: PassState, m: Model, counting: list[Replica]) -> bool:
    """Moves under way (their replacements still count): each goes once it is covered."""
    moves = st.snapshot.moves
    if not moves:
        return False
    ids = {r.id for r in counting}
    moving = [r for r in counting if moves.get(r.id) in ids]
    if not moving:
        return False
    for r in moving:
        st.ledger.moves[r.id] = moves[r.id]
    mark(st, m, moving)
    replace(st, m, moving, counting, MOVE)
    st.ledger.rollout[m.name] = f"moving {len(moving)} replica(s) to a better placement"
    return True


def _keep_stalled(
    st: PassState, m: Model, counting: list[Replica], old: list[Replica], failed: str
) -> None:
    """A roll-out that failed: its failed replacements beyond the desired count go, not the
    old replicas, until the spec changes again."""
    st.ledger.stalled[m.name] = failed
    extra = len(counting) - st.counts.desired[m.name]
    for r in sorted(counting, key=lambda r: (r.created_at, r.id), reverse=True):
        if extra > 0 and r.state == "starting" and r.spec == failed:
            extra -= 1
            retire_one(st, r, m, STALLED)
            st.counts.live[m.name] -= 1
    if old:
        st.ledger.rollout[m.name] = (
            f"roll-out stopped: a replica on the new spec did not become ready; "
            f"{len(old)} kept on the previous spec (change the model to retry)"
        )


def _roll(st: PassState, m: Model, counting: list[Replica], old: list[Replica]) -> None:
    fresh_starting = sum(1 for r in counting if r.state == "starting" and r not in old)
    want = st.counts.desired[m.name]
    n = budget(len(counting), want, st.settings.rollout_surge, fresh_starting, len(old))
    movers = old[:n]
    if movers:
        st.ledger.rolling.add(m.name)
    mark(st, m, movers)
    replace(st, m, movers, counting, ROLL)
    done = len(counting) - len(old)
    st.ledger.rollout[m.name] = (
        f"rolling update: {done} on the new spec, {len(old)} on the previous, "
        f"{len(movers)} being replaced"
    )


def _drop_worse(st: PassState, m: Model, counting: list[Replica]) -> None:
    """A better placement already running or starting beside a worse one (a move under way,
    or a scale-down): the worse one goes first, and only once the rest cover."""
    extra = len(counting) - st.counts.desired[m.name]
    if extra <= 0:
        return
    ranked = sorted(counting, key=lambda r: (rank(st, m, r), r.created_at, r.id))
    best = rank(st, m, ranked[0])
    worse = [r for r in reversed(ranked) if r.state == "running" and rank(st, m, r) > best]
    movers = worse[:extra]
    if movers:
        mark(st, m, movers)
        replace(st, m, movers, counting, MOVE)
        st.ledger.rollout[m.name] = f"moving {len(movers)} replica(s) to a better profile"


def rank(st: PassState, m: Model, r: Replica) -> float:
    """How good a replica's placement is for its model: its profile's place in the list, or
    for `placement: cheapest` what its devices cost (lower is better)."""
    found = st.ranks.get(r.id)
    if found is None:
        if m.placement == "cheapest":
            nodes = st.inv.nodes

            def node(node_id: str) -> Node | None:
                ns = nodes.get(node_id)
                return ns.node if ns is not None else None

            found = st.placer.costs.of(r.shards, node)
        else:
            found = float(profile_rank(m, r.profile))
        st.ranks[r.id] = found
    return found


def consolidate(st: PassState) -> None:
    """Start a better-placed replacement for a replica on a worse profile (or a dearer
    placement), on free room only and after every model had its turn; at most
    settings.consolidate_per_pass a pass. Never churning: only a strictly better placement,
    never by preemption, only replicas ready for min_lifetime_s, and not for a model that is
    held, rolling, or has anything starting."""
    left = st.settings.consolidate_per_pass
    if left == 0:
        return
    tries = 4 * left  # placement trials are not free: a bounded few per pass
    stopped = {a.model for a in st.ledger.stops}
    for m in st.snapshot.models:
        if left == 0 or tries == 0:
            break
        if m.placement != "cheapest":
            held = st.inv.facts.profiles_held.get(m.name)
            if held is None or held == (m.profiles[0].name,):
                continue  # the common case: all on the preferred profile (or none)
        worst = _worst_settled(st, m, stopped)
        if worst is not None and (rank(st, m, worst) > 0 or m.placement == "cheapest"):
            tries -= 1
            if move(st, m, worst):
                left -= 1


def _worst_settled(st: PassState, m: Model, stopped: set[str]) -> Replica | None:
    """The model's worst-placed replica settled for min_lifetime_s, when the model is calm:
    not held nor rolling, all its replicas running, current and as many as it wants."""
    name = m.name
    holds, ledger = st.holds, st.ledger
    if name in holds.honoured or name in holds.giving_way or name in ledger.rollout:
        return None
    reps = [r for r in st.inv.facts.by_model.get(name, []) if r.counts]
    if any(r.id in ledger.retired or r.state != "running" for r in reps):
        return None
    if any(m.profile(r.profile) is None for r in reps):
        return None  # a removed profile's replica: replace_stale replaces it
    if len(reps) != st.counts.desired[name] or name in stopped:
        return None
    settle = timedelta(seconds=st.settings.min_lifetime_s)
    settled = [r for r in reps if r.ready_at and r.ready_at + settle <= st.now]
    worst = sorted(settled, key=lambda r: (-rank(st, m, r), r.created_at, r.id))
    return worst[0] if worst else None


def move(st: PassState, m: Model, r: Replica) -> bool:
    """Place a replacement for `r` on a strictly better placement, if one fits now."""
    here = rank(st, m, r)
    if m.placement == "cheapest":
        better = m
    else:
        ahead = m.profiles[: int(min(here, len(m.profiles)))]
        better = m.model_copy(update={"profiles": ahead})
    if not better.profiles:
        return False
    fitted = st.placer.place(better, st.inv, explain=False).placement
    if fitted is None:
        return False
    if m.placement == "cheapest" and st.placer.cost(fitted, st.inv) >= here:
        return False
    why = f"consolidate: replaces {r.id} (profile {r.profile})"
    start_move(st, m, r, fitted, ("consolidation", why))
    st.ledger.rollout[m.name] = f"moving {r.id} from profile {r.profile} to {fitted.profile.name}"
    return True


def outdated(m: Model, reps: list[Replica], specs: dict[str, str] | None) -> list[Replica]:
    """Replicas that no longer run what the model says, oldest first. An unknown spec (a job
    written before digests, or no digest for the model) is never judged outdated."""
    if specs is None:
        return []
    out = []
    for r in reps:
        want = specs.get(r.profile)
        if m.profile(r.profile) is None or (want and r.spec and r.spec != want):
            out.append(r)
    return sorted(out, key=lambda r: (r.created_at, r.id))


def budget(counting: int, desired: int, surge: int, fresh_starting: int, old: int) -> int:
    """How many of `old` replicas to treat as being replaced in this pass.

    Those whose replacements exist already (`counting` above `desired`), plus as many new
    replacements as the surge allows beside the fresh replicas still starting. Recomputed
    each pass from the replicas alone, so nothing has to be remembered between passes.
    """
    covered = min(old, max(0, counting - desired))
    new = min(old - covered, max(0, surge - fresh_starting))
    return covered + new


def profile_rank(m: Model, profile: str) -> int:
    for i, p in enumerate(m.profiles):
        if p.name == profile:
            return i
    return NO_PROFILE
