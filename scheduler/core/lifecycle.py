"""Which replicas are replaced make-before-break, besides those on draining nodes.

Rolling update: a replica whose spec (a digest of what it runs, from its job) differs from
what the model would start now, or whose profile the model no longer has. Consolidation: a
running replica on a worse placement than the model could have now (a later profile, or a
dearer one for `placement: cheapest`). Both go through the same replacement as a drain
(decide._Pass.replace): the replica stops counting as live, the model grows a replacement,
and the replica is stopped once enough others run. Defragmentation, which moves replicas
for a waiting model the same way, is its own mixin (defragment.py).

`Lifecycle` holds these steps of a pass (decide._Pass inherits it); the functions below it
are pure helpers: what is outdated, how many may be replaced at once.
"""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.defragment import Defragment
from scheduler.core.models import (
    Model,
    Node,
    Replica,
    Snapshot,
    StartAction,
)
from scheduler.core.placement import Placement, commit

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
ROLL = (
    "rolling update: not serving yet, restarted on the model's new spec",
    "rolling update: replaced by a replica on the model's new spec",
)
MOVE = (
    "consolidation: not serving yet",
    "consolidation: replaced by a replica on a better placement",
)

NO_PROFILE = 1 << 30  # rank of a replica whose profile the model no longer lists


class Lifecycle(Defragment):
    """Rolling updates, moves under way, consolidation and defragmentation: the steps of a
    pass that replace replicas make-before-break. Mixed into decide._Pass, whose state
    (declared here) and replace/mark/retire_one steps they use."""

    # Besides the state Defragment declares:
    snapshot: Snapshot
    live: dict[str, int]
    rolling: set[str]
    stalled: dict[str, str]
    ranks: dict[str, float]
    moves: dict[str, str]

    def new_id(self, model: str) -> str:
        raise NotImplementedError

    def mark(self, m: Model, movers: list[Replica]) -> None:
        raise NotImplementedError

    def replace(
        self, m: Model, movers: list[Replica], counting: list[Replica], why: tuple[str, str]
    ) -> None:
        raise NotImplementedError

    def retire_one(self, r: Replica, m: Model, reason: str) -> None:
        raise NotImplementedError

    def stall(self, m: Model, r: Replica) -> None:
        """A replica on the current spec that did not become ready, while older ones still run:
        the roll-out stops there (the old replicas are kept) until the spec changes again."""
        specs = self.snapshot.specs.get(m.name) or {}
        if not r.spec or specs.get(r.profile) != r.spec:
            return
        reps = [x for x in self.inv.facts.by_model.get(m.name, []) if x.counts]
        if outdated(m, reps, specs):
            self.stalled[m.name] = r.spec
            self.rollout[m.name] = (
                f"roll-out stopped: replica {r.id} on the new spec did not become ready "
                f"within {m.load_grace_s}s; the previous replicas are kept"
            )

    def renew(self, m: Model) -> None:
        """Rolling update, and moves to a better placement whose replacement already runs or
        starts. At most settings.rollout_surge replacements start at a time beside the fresh
        replicas still starting; never below the desired count live (make-before-break)."""
        # Replicas of a removed profile are replace_stale's (they no longer count as live).
        current = self.inv.facts.current.get(m.name)
        if not current:
            return
        retired = self.retired
        counting = [r for r in current if r.id not in retired] if retired else current
        if not counting:
            return
        moves = self.snapshot.moves
        moving: list[Replica] = []
        if moves:
            ids = {r.id for r in counting}
            moving = [r for r in counting if moves.get(r.id) in ids]
        if moving:
            # Moves under way (their replacements still count): each goes once it is covered.
            for r in moving:
                self.moves[r.id] = self.snapshot.moves[r.id]
            self.mark(m, moving)
            self.replace(m, moving, counting, MOVE)
            self.rollout[m.name] = f"moving {len(moving)} replica(s) to a better placement"
            return
        specs = self.snapshot.specs.get(m.name)
        old = outdated(m, counting, specs)
        failed = self.snapshot.stalled.get(m.name)
        if failed is not None and specs and failed in specs.values():
            self.stalled[m.name] = failed
            # Its failed replacements beyond the desired count go, not the old replicas.
            extra = len(counting) - self.desired[m.name]
            for r in sorted(counting, key=lambda r: (r.created_at, r.id), reverse=True):
                if extra > 0 and r.state == "starting" and r.spec == failed:
                    extra -= 1
                    self.retire_one(r, m, "roll-out stopped: its replacement did not start")
                    self.live[m.name] -= 1
            if old:
                self.rollout[m.name] = (
                    f"roll-out stopped: a replica on the new spec did not become ready; "
                    f"{len(old)} kept on the previous spec (change the model to retry)"
                )
            return
        want = self.desired[m.name]
        if old:
            fresh_starting = sum(1 for r in counting if r.state == "starting" and r not in old)
            n = budget(len(counting), want, self.settings.rollout_surge, fresh_starting, len(old))
            movers = old[:n]
            if movers:
                self.rolling.add(m.name)
            self.mark(m, movers)
            self.replace(m, movers, counting, ROLL)
            done = len(counting) - len(old)
            self.rollout[m.name] = (
                f"rolling update: {done} on the new spec, {len(old)} on the previous, "
                f"{len(movers)} being replaced"
            )
            return
        # A better placement already running or starting beside a worse one (a move under
        # way, or a scale-down): the worse one goes first, and only once the rest cover.
        extra = len(counting) - want
        if extra <= 0:
            return
        ranked = sorted(counting, key=lambda r: (self.rank(m, r), r.created_at, r.id))
        best = self.rank(m, ranked[0])
        worse = [r for r in reversed(ranked) if r.state == "running" and self.rank(m, r) > best]
        movers = worse[:extra]
        if movers:
            self.mark(m, movers)
            self.replace(m, movers, counting, MOVE)
            self.rollout[m.name] = f"moving {len(movers)} replica(s) to a better profile"

    def rank(self, m: Model, r: Replica) -> float:
        """How good a replica's placement is for its model: its profile's place in the list,
        or for `placement: cheapest` what its devices cost (lower is better)."""
        found = self.ranks.get(r.id)
        if found is None:
            if m.placement == "cheapest":
                found = self.placer.costs.of(r.shards, self._node)
            else:
                found = float(profile_rank(m, r.profile))
            self.ranks[r.id] = found
        return found

    def _node(self, node_id: str) -> Node | None:
        ns = self.inv.nodes.get(node_id)
        return ns.node if ns is not None else None

    def consolidate(self) -> None:
        """Start a better-placed replacement for a replica on a worse profile (or a dearer
        placement), on free room only and after every model had its turn; at most
        settings.consolidate_per_pass a pass. Never churning: only a strictly better
        placement, never by preemption, only replicas ready for min_lifetime_s, and not for a
        model that is held, rolling, or has anything starting."""
        left = self.settings.consolidate_per_pass
        if left == 0:
            return
        settle = timedelta(seconds=self.settings.min_lifetime_s)
        tries = 4 * left  # placement trials are not free: a bounded few per pass
        stopped = {a.model for a in self.stops}
        for m in self.snapshot.models:
            if left == 0 or tries == 0:
                break
            if m.placement != "cheapest":
                held = self.inv.facts.profiles_held.get(m.name)
                if held is None or held == (m.profiles[0].name,):
                    continue  # the common case: all on the preferred profile (or none)
            every = self.inv.facts.by_model.get(m.name, [])
            if m.name in self.held or m.name in self.giving_way or m.name in self.rollout:
                continue
            reps = [r for r in every if r.counts]
            if any(r.id in self.retired or r.state != "running" for r in reps):
                continue
            if any(m.profile(r.profile) is None for r in reps):
                continue  # a removed profile's replica: replace_stale replaces it
            if len(reps) != self.desired[m.name] or m.name in stopped:
                continue
            settled = [r for r in reps if r.ready_at and r.ready_at + settle <= self.now]
            worst = sorted(settled, key=lambda r: (-self.rank(m, r), r.created_at, r.id))
            if worst and (self.rank(m, worst[0]) > 0 or m.placement == "cheapest"):
                tries -= 1
                if self.move(m, worst[0]):
                    left -= 1

    def move(self, m: Model, r: Replica) -> bool:
        """Place a replacement for `r` on a strictly better placement, if one fits now."""
        here = self.rank(m, r)
        if m.placement == "cheapest":
            better = m
        else:
            ahead = m.profiles[: int(min(here, len(m.profiles)))]
            better = m.model_copy(update={"profiles": ahead})
        if not better.profiles:
            return False
        fitted = self.placer.place(better, self.inv, explain=False).placement
        if fitted is None:
            return False
        if m.placement == "cheapest" and self.placer.cost(fitted, self.inv) >= here:
            return False
        self.start_move(m, r, fitted, f"consolidate: replaces {r.id} (profile {r.profile})")
        self.rollout[m.name] = f"moving {r.id} from profile {r.profile} to {fitted.profile.name}"
        return True

    def start_move(self, m: Model, r: Replica, fitted: Placement, reason: str) -> None:
        commit(m, fitted, self.inv)
        self.retired.add(r.id)
        rid = self.new_id(m.name)
        self.moves[r.id] = rid
        self.starts.append(
            StartAction(
                model=m.name,
                profile=fitted.profile.name,
                replica=rid,
                shards=fitted.shards,
                reason=reason,
            )
        )


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
