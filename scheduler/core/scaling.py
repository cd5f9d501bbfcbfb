"""How many replicas a model wants (docs/decision-core.md, rules S1-S3).

Each signal the model has an objective for asks for a count, as Kubernetes HPA does with
several metrics, and the largest wins, clamped to [min, max]:

- requests: ceil((inflight + queued) / target_per_replica), always on;
- queue: ceil(waiting / queue_per_replica);
- kv / ttft / itl: ceil(serving * value / objective), `serving` being the replicas the value was
  measured on. A replica still starting is capacity on its way: it is not in `serving`, so the
  count these ask for does not grow pass after pass while a slow load goes on, and it is in
  `live`, so it answers what they ask for.

A signal within 10% of its objective asks for what the model has (HPA's tolerance). Scale-up
is immediate; scale-down goes only to the highest count asked over the stabilisation window
(Snapshot.recent_desired), at most `scale_down_step` per pass, and never on incomplete metrics.
An idle on-demand model still goes to zero after eviction_grace_s, as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache

from scheduler.core.models import (
    Demand,
    DesiredMark,
    Load,
    Model,
    Replica,
    Settings,
    rfc3339,
)

TOLERANCE = 0.1


def last_used(demand: Demand | None, replicas: Iterable[Replica]) -> datetime | None:
    """The latest use anyone recorded: the gateway's demand, or the replicas' own marks."""
    stamps = [r.last_used_at for r in replicas if r.last_used_at is not None]
    if demand is not None and demand.last_used is not None:
        stamps.append(demand.last_used)
    return max(stamps) if stamps else None


def idle_seconds(used: datetime | None, now: datetime) -> float:
    """Seconds since last use; no record at all counts as idle since forever."""
    if used is None:
        return math.inf
    return max((now - used).total_seconds(), 0.0)


# Plain classes, not dataclasses: compiled (mypyc), a dataclass is built through its generated
# __init__, which runs as Python; these are made per model and pass.
class Ask:
    """What one signal asks for: a count, and how to say it (as winner, and as a side note)."""

    def __init__(self, signal: str, count: int, headline: str, note: str) -> None:
        self.signal = signal
        self.count = count
        self.headline = headline
        self.note = note


class Want:
    def __init__(self, count: int, recommended: int, why: str) -> None:
        self.count = count  # what the pass acts on
        self.recommended = recommended  # what the signals asked, before stabilisation
        self.why = why


def _count(ask: Ask) -> int:
    return ask.count


@lru_cache(maxsize=1024)
def _g(target: float) -> str:
    """A catalog's target as its text (`:g`): the same few values, for every model every pass,
    and formatting a float is far dearer than looking its text up."""
    return f"{target:g}"


def _tolerant(need: float, have: int) -> int:
    """ceil(need), except that within 10% of what the model has it keeps that."""
    if have > 0 and abs(need / have - 1.0) <= TOLERANCE:
        return have
    return math.ceil(need - 1e-9)


def _objective(
    signal: str, label: str, value: float, target: float, serving: int, fmt: str, unit: str
) -> Ask | None:
    if serving <= 0:
        return None  # measured on nothing: no ratio to scale by
    ratio = value / target
    count = serving if abs(ratio - 1.0) <= TOLERANCE else math.ceil(serving * ratio - 1e-9)
    v, t = format(value, fmt), format(target, fmt)
    cmp = ">" if value > target else "<="
    return Ask(signal, count, f"{label} {v}{unit} {cmp} {t}{unit} objective", f"{label} {v}/{t}")


def signal_asks(model: Model, demand: Demand | None, load: Load | None, serving: int) -> list[Ask]:
    """What each signal with an objective (and data) asks for."""
    sc = model.scaling
    asks: list[Ask] = []
    if demand is not None:
        requests = demand.inflight + demand.queued
        count = _tolerant(requests / sc.target_per_replica, serving)
        head = f"{requests} requests at {_g(sc.target_per_replica)} per replica"
        asks.append(Ask("requests", count, head, f"requests {requests}"))
    if load is None:
        return asks
    base = load.reporting or serving
    if sc.queue_per_replica is not None and load.waiting is not None:
        per = load.waiting / base if base else load.waiting
        count = _tolerant(load.waiting / sc.queue_per_replica, base)
        cmp = ">" if per > sc.queue_per_replica else "<="
        q, t = f"{per:.3g}", f"{sc.queue_per_replica:g}"
        asks.append(Ask("queue", count, f"queue {q} per replica {cmp} {t}", f"queue {q}/{t}"))
    if sc.kv_cache_target is not None and load.kv_cache is not None:
        ask = _objective("kv", "kv", load.kv_cache, sc.kv_cache_target, base, ".2f", "")
        asks += [ask] if ask else []
    if sc.ttft_p90_ms is not None and load.ttft_p90_ms is not None:
        ask = _objective("ttft", "ttft p90", load.ttft_p90_ms, sc.ttft_p90_ms, base, ".0f", " ms")
        asks += [ask] if ask else []
    if sc.itl_p90_ms is not None and load.itl_p90_ms is not None:
        ask = _objective("itl", "itl p90", load.itl_p90_ms, sc.itl_p90_ms, base, ".0f", " ms")
        asks += [ask] if ask else []
    return asks


def _explain(count: int, asks: Sequence[Ask], winner: Ask | None, head: str | None) -> str:
    lead = head or (winner.headline if winner else "no signal")
    notes = [a.note for a in asks if a is not winner] if len(asks) > 1 else []
    side = f" ({', '.join(notes)})" if notes else ""
    return f"{count} replica{'s' if count != 1 else ''}: {lead}{side}"


def want(
    model: Model,
    demand: Demand | None,
    load: Load | None,
    replicas: Sequence[Replica],
    marks: Sequence[DesiredMark],
    now: datetime,
    settings: Settings,
    replacing: int = 0,
) -> Want:
    """The count a model wants this pass, what the signals asked before stabilisation, and why.
    `replacing`: replicas that are the replacement of another one under way (`replacements`)."""
    sc = model.scaling
    live = serving = 0
    for r in replicas:
        state = r.state
        if state != "stopping":  # Replica.counts
            live += 1
            if state == "running":
                serving += 1
    asks = signal_asks(model, demand, load, serving)
    winner = max(asks, key=_count, default=None) if len(asks) != 1 else asks[0]
    raw = winner.count if winner else 0
    count = min(max(raw, sc.min), sc.max)
    head: str | None = None
    if winner is None or count > raw:
        head = f"minimum {sc.min}"
    elif count < raw:
        head = f"maximum {sc.max}, {winner.headline}"
    if sc.on_demand:
        busy = (demand is not None and demand.inflight + demand.queued > 0) or bool(
            load is not None and ((load.running or 0) + (load.waiting or 0)) > 0
        )
        if busy and count == 0 and sc.max > 0:
            count, head = 1, "on demand, in use"
        elif not busy:
            used = last_used(demand, replicas)
            idle = idle_seconds(used, now)
            # The sentences name instants, not elapsed seconds: a plan must not change with
            # the clock alone (the service carries a quiet pass over, calm.py).
            if idle >= settings.eviction_grace_s:
                why = f"0 replicas: on demand, idle {idle_since(used)}"
                return Want(0, 0, why)  # the idle grace is its own stabilisation
            if count == 0 and sc.max > 0 and used is not None:
                # Used within eviction_grace_s: one replica stays whatever the minimum (with
                # min 0 the idle model would otherwise go on the first pass without load).
                ends = rfc3339(used + timedelta(seconds=settings.eviction_grace_s))
                count, head = 1, f"on demand, used {rfc3339(used)} (grace until {ends})"
    recommended = count
    # What a stabilisation may keep: a replacement under way is not growth (rule S2).
    keepable = live - replacing
    if load is not None and not load.complete and count < keepable:
        keep = min(keepable, sc.max)
        return Want(keep, recommended, f"{keep} replicas: metrics incomplete, no scale-down")
    why = _explain(count, asks, winner, head)
    if count >= keepable:
        return Want(count, recommended, why)
    return _scale_down_held(model, count, keepable, marks, now, settings, why)


def _scale_down_held(
    model: Model,
    count: int,
    live: int,
    marks: Sequence[DesiredMark],
    now: datetime,
    settings: Settings,
    why: str,
) -> Want:
    """Fewer than live (`live`: less the replacements under way): only down to the highest
    count asked over the window, at most `step` a pass, never before the window was watched
    whole (rule S2)."""
    sc = model.scaling
    window = window_of(model, settings)
    step = sc.scale_down_step if sc.scale_down_step is not None else settings.scale_down_step
    floor = count
    if window > 0:
        start = now - timedelta(seconds=window)
        floor = max([count, *(m.count for m in marks if m.at > start)])
        if not any(m.at <= start for m in marks):
            floor = live  # not watched for a whole window yet (e.g. just restarted): keep
    held = max(count, min(floor, live))
    if step > 0:
        held = max(held, live - step)
    held = min(held, sc.max)  # a lowered maximum is not a scale-down to stabilise
    if held > count:
        why = f"{held} replicas: scale-down held ({window} s window, step {step or 'any'}); {why}"
    return Want(held, count, why)


def replacements(
    replicas: Sequence[Replica], specs: dict[str, str] | None, moves: dict[str, str]
) -> int:
    """How many of a model's replicas are the replacement of another one still running: a
    roll-out's surge (as many as there are replicas on the current spec and replicas on an
    outdated one, lifecycle.outdated) and the new replica of each move under way. The window
    of rule S2 keeps the count they replace, not them: else the replaced replica would stay
    until the window passed (after a restart, a whole window)."""
    if not specs and not moves:
        return 0  # the common case: nothing to compare
    fresh = old = moved = 0
    ids = {r.id for r in replicas} if moves else None
    for r in replicas:
        if r.state == "stopping":
            continue  # no longer live: replaces nothing
        if specs and r.spec:
            want = specs.get(r.profile)
            if want:
                if r.spec == want:
                    fresh += 1
                else:
                    old += 1
        if ids is not None and moves.get(r.id) in ids:
            moved += 1
    return min(fresh, old) + moved


def window_of(model: Model, settings: Settings) -> int:
    w = model.scaling.scale_down_window_s
    return settings.scale_down_window_s if w is None else w


def remember(
    marks: Sequence[DesiredMark], at: datetime, count: int, window_s: int
) -> list[DesiredMark]:
    """The marks to hand to the next pass: this one, those within the window, and the newest
    one before it (which shows the window has been watched whole)."""
    start = at - timedelta(seconds=window_s)
    inside = [m for m in marks if m.at > start and m.at < at]
    before = [m for m in marks if m.at <= start]
    keep = ([max(before, key=lambda m: m.at)] if before else []) + inside
    return [*sorted(keep, key=lambda m: m.at), DesiredMark(at=at, count=count)]


def idle_since(used: datetime | None) -> str:
    return "forever" if used is None else f"since {rfc3339(used)}"
