"""Convergence oracles: pass after pass with demand and capacity unchanged (the stopped
replicas gone, the started ones live), a run must reach a fixed point, and soon.

`Watch` sees each (snapshot, plan) of such a run and records what it finds:
- CYCLE: a (replica set, placement) state seen again after passes with changes in between,
  and the same changes made from it again, whatever the cycle's length (a pair taking turns,
  or three or four models in a ring);
- TURNS: a replica of A stopped for B after one of B was stopped for A;
- TWICE: a model preempted again for the same model while its hold for it lasts, and the
  preemptor started nothing in between (the room it took went to someone else);
- NEVER_QUIET: no fixed point (QUIET passes in a row without an action) by the run's end;
- OVER_BOUND: more passes with changes before the fixed point than bound() of the first
  snapshot;
- ORACLE: a plan breaking a rule (status_checks.check_all), by its first line.
`fight` runs a generated scenario's final snapshot so, checking every plan (check_all).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis.control import BuildContext
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.data import ConjectureData
from scenario_crowded import crowded_scenarios
from scenario_gen import Scenario, scenarios, ts
from scenario_runs import dump, history, step, stops_of
from status_checks import check_all

from scheduler.core.decide import decide
from scheduler.core.models import Plan, Shard, Snapshot, StartAction
from scheduler.core.validate import parse_snapshot

CYCLE, TURNS, TWICE, ORACLE = "cycle", "turns", "twice", "oracle"
NEVER_QUIET, OVER_BOUND = "never quiet", "over bound"
KINDS = (CYCLE, TURNS, TWICE, NEVER_QUIET, OVER_BOUND, ORACLE)
QUIET = 5  # passes in a row without an action: a fixed point
# Passes a run may go on past its length to become quiet: time alone may still change a plan
# (a hold or min_lifetime_s ending, a replica timing out past its load grace).
SETTLE = 60
DEFAULT = {"eviction_grace_s": 300, "min_lifetime_s": 600, "preempt_hold_s": 300, "max_victims": 3}
ZERO = {"eviction_grace_s": 0, "min_lifetime_s": 0, "preempt_hold_s": 0, "max_victims": 3}
ADVANCES = (60.0, 30.0, 120.0, 300.0)

Where = tuple[tuple[str, tuple[str, ...]], ...]
State = tuple[tuple[str, str, str, Where], ...]
Changes = tuple[tuple[str, str, str, Where, str], ...]


def bound(snap: Snapshot) -> int:
    """The passes with changes a run from `snap` may take before its fixed point (see
    docs/decision-core.md, "Convergence"): two per replica it starts with (stopped, or moved:
    a start and a stop), three per replica its models may want (started, then moved), four
    more (a load-grace time-out and its restart, a hold ending)."""
    return 4 + 2 * len(snap.replicas) + 3 * sum(m.scaling.max for m in snap.models)


def _where(shards: Iterable[Shard]) -> Where:
    return tuple(sorted((s.node, tuple(s.gpus)) for s in shards))


def placement(snap: Snapshot) -> State:
    """The replica set and where each replica is, ids left out (a restart gets a new one)."""
    return tuple(sorted((r.model, r.profile, r.state, _where(r.shards)) for r in snap.replicas))


def changes(snap: Snapshot, plan: Plan) -> Changes:
    """What the plan does, ids left out: the starts, and the stops by the stopped replica's
    place (a stop for another model named with it)."""
    where = {r.id: (r.model, r.profile, _where(r.shards)) for r in snap.replicas}
    out: list[tuple[str, str, str, Where, str]] = []
    for a in plan.actions:
        if isinstance(a, StartAction):
            out.append(("start", a.model, a.profile, _where(a.shards), ""))
        else:
            model, profile, at = where.get(a.replica, (a.model, "", ()))
            out.append(("stop", model, profile, at, a.preempted_for or ""))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Finding:
    kind: str
    at: int  # the pass it was seen at
    detail: str


@dataclass
class Watch:
    """One run, pass by pass: what the oracles found, and the passes that changed anything."""

    seen: dict[tuple[State, Changes], int] = field(default_factory=dict)
    changed: list[int] = field(default_factory=list)
    pairs: set[tuple[str, str]] = field(default_factory=set)
    # (victim model, preemptor) -> the victim's hold for it, and whether the preemptor
    # started anything since.
    held: dict[tuple[str, str], tuple[datetime, bool]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    passes: int = 0
    limit: int = 0  # bound() of the run's first snapshot

    def observe(self, snap: Snapshot, plan: Plan) -> None:
        if self.passes == 0:
            self.limit = bound(snap)
        if plan.actions:
            self._cycle(snap, plan)
        self._preemptions(snap, plan)
        if plan.actions:
            self.changed.append(self.passes)
        self.passes += 1

    def _cycle(self, snap: Snapshot, plan: Plan) -> None:
        """The same state and the same changes again: the run goes round (a state met again
        with other changes is not, as when a hold or a minimum lifetime ended in between)."""
        first = self.seen.setdefault((placement(snap), changes(snap, plan)), self.passes)
        since = sum(1 for i in self.changed if i >= first)
        if since and not any(f.kind == CYCLE for f in self.findings):
            detail = f"pass {self.passes} is pass {first} again ({since} passes with changes)"
            self.find(CYCLE, detail)

    def _preemptions(self, snap: Snapshot, plan: Plan) -> None:
        # A start in this plan counts: the room taken before reached the preemptor.
        started = {a.model for a in plan.actions if isinstance(a, StartAction)}
        for key, (until, got) in list(self.held.items()):
            self.held[key] = (until, got or key[1] in started)
        pairs = {(a.model, a.preempted_for) for a in stops_of(plan) if a.preempted_for}
        for victim, taker in sorted(pairs):
            if (taker, victim) in self.pairs:
                self.find(TURNS, f"{victim} and {taker} take turns")
            was = self.held.get((victim, taker))
            if was is not None and snap.now < was[0] and not was[1]:
                self.find(TWICE, f"{victim} preempted again for {taker} within its hold")
            hold = plan.holds.get(victim)
            if hold is not None and hold.for_ == taker:
                self.held[(victim, taker)] = (hold.until, taker in started)
        self.pairs |= pairs

    def find(self, kind: str, detail: str) -> None:
        self.findings.append(Finding(kind, self.passes, detail))

    def settled(self) -> bool:
        """The last QUIET passes changed nothing."""
        return self.passes >= QUIET and all(i < self.passes - QUIET for i in self.changed)

    def finish(self) -> list[Finding]:
        """The findings, with NEVER_QUIET or OVER_BOUND added when the run was not quiet by
        its end, or took more passes with changes than its bound."""
        if not self.settled():
            self.find(NEVER_QUIET, f"still changing at pass {self.passes - 1}")
        elif len(self.changed) > self.limit:
            self.find(OVER_BOUND, f"{len(self.changed)} passes with changes (bound {self.limit})")
        return self.findings


def drawn(seed: int) -> Scenario | None:
    """The scenario of a seed: even seeds from scenario_gen, odd ones crowded (None: the
    strategy gave up on that random source)."""
    strategy = scenarios(small_settings=True) if seed % 2 == 0 else crowded_scenarios()
    data = ConjectureData(random=random.Random(seed))
    try:
        with BuildContext(data, wrapped_test=drawn):
            scn: Scenario = data.draw(strategy)
    except StopTest:
        return None
    return scn


def hunt(seed: int, passes: int) -> Watch | None:
    """One seeded run: the scenario's history, then `passes` passes (at least) of a fight
    over the room with settings and demand drawn from the seed."""
    scn = drawn(seed)
    if scn is None:
        return None
    rng = random.Random(seed)
    cfg = rng.choice([DEFAULT, ZERO])
    load = rng.choice([40, 8, None])
    watch = fight(contested(scn, cfg, load), passes, rng)
    watch.finish()
    return watch


def contested(scn: Scenario, cfg: dict[str, int], load: int | None) -> Snapshot:
    """The scenario's history, built by the core itself, then settings fixed and, from here
    on, the demand too (with `load`, every model busy at once: they fight over the room)."""
    snap = [s for s, _ in history(scn)][-1]
    data = dump(snap)
    data["settings"] = cfg
    if load is not None:
        data["demand"] = {
            m.name: {"inflight": load, "last_used": ts(snap.now)} for m in snap.models
        }
    return parse_snapshot(data)


def fight(snap: Snapshot, passes: int, rng: random.Random, check: bool = True) -> Watch:
    """At least `passes` passes from `snap`, then on until the run is quiet (SETTLE passes at
    most): each stop taking one pass or none, the clock moving 30 s to 5 min (drawn from
    `rng`); every plan checked against the rules when `check`."""
    watch = Watch()
    for i in range(passes + SETTLE):
        if i >= passes and watch.settled():
            break
        plan = decide(snap)
        if check:
            try:
                check_all(snap, plan)
            except AssertionError as e:
                watch.find(ORACLE, str(e).splitlines()[0] if str(e) else "assertion")
        watch.observe(snap, plan)
        advance = rng.choice(ADVANCES)
        snap = same_demand(step(snap, plan, advance, rng.random() < 0.5), advance)
    return watch


def same_demand(snap: Snapshot, advance_s: float) -> Snapshot:
    """The demand as it was, the clock moved on: each last use as long ago as before (an
    on-demand model used within its grace stays so; one idle past it stays idle)."""
    later = timedelta(seconds=advance_s)
    demand = {
        name: d.model_copy(update={"last_used": d.last_used + later})
        if d.last_used is not None
        else d
        for name, d in snap.demand.items()
    }
    return snap.model_copy(update={"demand": demand})
