"""Carrying a quiet pass over: when nothing changed since the last pass, reuse its
view and plan instead of building a snapshot and deciding again.

A pass may be carried over only when the same view would be built and the same plan decided:
- every watch answered nothing new and failed nothing since the view was built, and none is
  stale (a hung blocking query says nothing); one of them watches the whole KV prefix, so the
  scheduler's own state key, its status keys and anything else under it count too;
- the actuator did nothing in between and has nothing queued, running, or finished but unread
  (its overlay would be the same);
- leadership did not change (a new leader forgets what it wrote);
- the kept plan had no actions, Nomad failed no replica, no job was to be purged, every read
  answered and none was of a kind no watch covers (a job's evaluations, read while it has no
  allocation), no reread was needed, and the status write went through (a carried pass
  writes nothing);
- the demand came from Consul KV only and no signal source is set (those are read each pass);
- the clock has not reached the plan's calm_until (core/calm.py) nor the end of what the
  builder carries by itself (SnapshotBuilder.expires).
When in doubt the service does the full pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from scheduler.adapters.snapshot_builder import ClusterView, SnapshotBuilder
from scheduler.core.calm import calm_until
from scheduler.core.models import Plan
from scheduler.demand.kv import KVDemandSource
from scheduler.service.watch import BlockingWatch


@dataclass(frozen=True)
class Inputs:
    """What a pass's view rests on besides Nomad's and Consul's data, read before the build:
    equal inputs at two moments mean nothing the view is made of changed in between."""

    watches: tuple[tuple[str, int], ...]  # each watch's version
    leader: tuple[bool, int]  # leading, and how many times leadership changed
    actuator: int  # work items finished (Actuator.quiet_mark)


@dataclass(frozen=True)
class Kept:
    view: ClusterView
    plan: Plan
    inputs: Inputs
    until: datetime | None  # the first instant the same inputs could decide otherwise


def earliest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def quiet(view: ClusterView, plan: Plan) -> bool:
    """The pass did nothing and would do nothing again: no action, nothing Nomad failed, no
    job to purge, every read answered and watched (ClusterView.complete)."""
    return not plan.actions and not view.faults and not view.purgeable and view.complete


class CarryOver:
    """The last full pass, kept while it may stand for the next ones."""

    def __init__(self) -> None:
        self._kept: Kept | None = None
        self.carried = 0  # passes carried over so far

    def keep(self, kept: Kept | None) -> None:
        self._kept = kept

    def reuse(self, inputs: Inputs | None, now: datetime) -> Kept | None:
        """The kept pass, when it may stand for a pass at `now` whose inputs are `inputs`
        (None: some input cannot be vouched for)."""
        kept = self._kept
        if kept is None or inputs is None or inputs != kept.inputs:
            return None
        if kept.until is not None and now >= kept.until:
            return None
        self.carried += 1
        return kept


def watched_inputs(
    watches: list[BlockingWatch], max_age: float, leader: tuple[bool, int], mark: int | None
) -> Inputs | None:
    """What the next view rests on besides the listings, or None when some of it cannot be
    vouched for: no watches (one-shot use), a watch failing or stale, the actuator busy."""
    if not watches or mark is None:
        return None
    now = time.monotonic()
    if any(w.last_error is not None or now - w.last_ok > max_age for w in watches):
        return None
    return Inputs(watches=tuple((w.name, w.version) for w in watches), leader=leader, actuator=mark)


def kept_if_quiet(
    view: ClusterView, plan: Plan, inputs: Inputs, builder: SnapshotBuilder
) -> Kept | None:
    """A quiet pass, kept for the next ones until the clock could change its plan."""
    if (
        not quiet(view, plan)
        or builder.signal_source is not None  # read each pass: unknown until read
        or not isinstance(builder.demand_source, KVDemandSource)
    ):
        return None
    until = earliest(calm_until(view.snapshot, plan), builder.expires(view.snapshot))
    return Kept(view, plan, inputs, until)
