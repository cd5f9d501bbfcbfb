"""What the snapshot builder keeps from one pass to the next.

Some of it lives in the scheduler's state key, so that a restart remembers it (holds, what was
preempted for whom, what went missing and since when); the rest lives in the process: each
model's last good value, its recent desired counts and when its servers last had work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, TypeAdapter, ValidationError

from scheduler.adapters.catalog import Catalog, printable
from scheduler.adapters.json_bounds import bounded_loads
from scheduler.core.models import (
    Demand,
    DesiredMark,
    Hold,
    Model,
    Plan,
    Quota,
    Reservation,
    Settings,
    Snapshot,
    Timestamp,
)
from scheduler.core.scaling import remember, window_of
from scheduler.core.validate import format_validation_error
from scheduler.demand.gateways import GatewayDemand

log = structlog.get_logger("llm-scheduler.snapshot")


@dataclass
class Gone:
    """What went missing and since when; kept in the state key so a restart remembers it."""

    models: dict[str, datetime] = field(default_factory=dict)  # model key deleted
    demand: dict[str, tuple[datetime, Demand]] = field(default_factory=dict)  # demand key deleted
    # model -> profile no longer in it while replicas of it run -> since when
    profiles: dict[str, dict[str, datetime]] = field(default_factory=dict)

    def copy(self) -> Gone:
        """A copy the next pass's changes leave alone (the status writer reads it later)."""
        profiles = {k: dict(v) for k, v in self.profiles.items()}
        return Gone(dict(self.models), dict(self.demand), profiles)

    def to_json(self) -> dict[str, Any]:
        return {
            # Full precision: a grace of seconds must not start up to a second early.
            "models": {k: v.isoformat() for k, v in sorted(self.models.items())},
            "demand": {
                k: {"since": t.isoformat(), "last": d.model_dump(mode="json")}
                for k, (t, d) in sorted(self.demand.items())
            },
            "profiles": {
                k: {p: t.isoformat() for p, t in sorted(v.items())}
                for k, v in sorted(self.profiles.items())
            },
        }


class _GoneDemand(BaseModel):
    since: Timestamp
    last: Demand


def _parse_gone(data: dict[str, Any], key: str, problems: list[str]) -> Gone:
    gone = Gone()
    for name, since in _part(data, "models", key, problems, "gone.").items():
        stamp = _valid(_STAMP, since, f"{key}: gone.models.{printable(str(name))}", problems)
        if stamp is not None:
            gone.models[str(name)] = stamp
    for name, value in _part(data, "demand", key, problems, "gone.").items():
        item = _valid(_GONE_DEMAND, value, f"{key}: gone.demand.{printable(str(name))}", problems)
        if item is not None:
            gone.demand[str(name)] = (item.since, item.last)
    for name, value in _part(data, "profiles", key, problems, "gone.").items():
        where = f"{key}: gone.profiles.{printable(str(name))}"
        since = _valid(_PROFILES_GONE, value, where, problems)
        if since:
            gone.profiles[str(name)] = since
    return gone


_STAMP: TypeAdapter[datetime] = TypeAdapter(Timestamp)
_GONE_DEMAND: TypeAdapter[_GoneDemand] = TypeAdapter(_GoneDemand)
_PROFILES_GONE: TypeAdapter[dict[str, datetime]] = TypeAdapter(dict[str, Timestamp])
_HOLD: TypeAdapter[Hold] = TypeAdapter(Hold)
_RESERVATION: TypeAdapter[Reservation] = TypeAdapter(Reservation)
T = TypeVar("T")


def _valid(adapter: TypeAdapter[T], value: Any, where: str, problems: list[str]) -> T | None:
    """The value, or None and a line naming where it is and what is wrong with it."""
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        problems += format_validation_error(err, root=where)
        return None


@dataclass
class LastGood:
    """Each catalog key's last good value: it stands in for a bad one."""

    models: dict[str, Model] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    demand: dict[str, Demand] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)


def parse_state(
    entries: list[dict[str, Any]], key: str, problems: list[str] | None = None
) -> tuple[dict[str, Hold], dict[str, str], Gone]:
    """(holds, replica -> model it was preempted for, what went missing) from the state key.
    A bad part is left out and named in `problems` (by key and field); the others stand."""
    problems = [] if problems is None else problems
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    if not raw:
        return {}, {}, Gone()
    try:
        data = bounded_loads(raw, 1 << 20)
    except ValueError as exc:  # our own key; a bad value only loses holds
        problems.append(f"{key}: {printable(str(exc))}")
        return {}, {}, Gone()
    data = _part({"state": data}, "state", key, problems)
    holds: dict[str, Hold] = {}
    for name, value in _part(data, "holds", key, problems).items():
        hold = _valid(_HOLD, value, f"{key}: holds.{printable(str(name))}", problems)
        if hold is not None:
            holds[str(name)] = hold
    preempted = {str(k): str(v) for k, v in _part(data, "preempted", key, problems).items()}
    return holds, preempted, _parse_gone(_part(data, "gone", key, problems), key, problems)


def parse_reservations(
    entries: list[dict[str, Any]], key: str, problems: list[str]
) -> dict[str, list[Reservation]]:
    """The room kept for models that preempted for it, from the state key (absent in state
    written before reservations: none). A bad reservation is left out and named (by key and
    field); the others stand. An unreadable key was named by parse_state already."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    try:
        data = bounded_loads(raw, 1 << 20) if raw else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, list[Reservation]] = {}
    for name, value in _part(data, "reservations", key, problems).items():
        where = f"{key}: reservations.{printable(str(name))}"
        if not isinstance(value, list):
            problems.append(f"{where}: Input should be a JSON array")
            continue
        kept = [_valid(_RESERVATION, v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
        good = [r for r in kept if r is not None]
        if good:
            out[str(name)] = good
    return out


def _part(
    data: dict[str, Any], name: str, key: str, problems: list[str], within: str = ""
) -> dict[Any, Any]:
    """data[name] when it is an object (or absent: empty); else empty, and a line says so."""
    value = data.get(name)
    if value is None or isinstance(value, dict):
        return value or {}
    where = "" if name == "state" else f" {within}{name}:"
    problems.append(f"{key}:{where} Input should be a JSON object")
    return {}


def parse_lifecycle(
    entries: list[dict[str, Any]], key: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(failed roll-outs: model -> spec digest, moves: replica -> replacement) from the
    scheduler's state key."""
    raw = next((e.get("Value") for e in entries if e.get("Key") == key), None)
    try:
        data = bounded_loads(raw, 1 << 20) if raw else {}
        stalled = {str(k): str(v) for k, v in (data.get("stalled") or {}).items()}
        moves = {str(k): str(v) for k, v in (data.get("moves") or {}).items()}
        return stalled, moves
    except (ValueError, TypeError, AttributeError):
        return {}, {}  # our own key; a bad value only forgets a failed roll-out or a move


class PassMemory:
    """What went missing, each model's recent desired counts, and when its servers last had
    work; the latest pass carried over since the last build."""

    def __init__(self) -> None:
        self.last = LastGood()
        self.gone = Gone()
        self.seen_demand: dict[str, Demand] = {}  # the demand keys of the last read
        self.gateway_demand = GatewayDemand()  # the gateways' instance keys, added up
        self.seen: dict[str, datetime] = {}  # model -> when its servers last had work
        self.marks: dict[str, list[DesiredMark]] = {}
        # The latest pass carried over since the last build: its snapshot, plan and when it
        # ran; its scale-down marks are recorded by the next build.
        self._carried: tuple[Snapshot, Plan, datetime] | None = None

    def remember(self, snapshot: Snapshot, plan: Plan) -> None:
        """Keep each model's desired count of this pass for the next passes' scale-down window."""
        self.record_carried()
        self._remember(snapshot, plan)

    def remember_carried(self, snapshot: Snapshot, plan: Plan, at: datetime) -> None:
        """A pass carried over at `at` asked what `plan` asks (the same plan). Only the latest
        such pass is recorded, and only when the marks are next needed: the marks of earlier
        carried passes have the same counts and are older, so within any window that holds
        one of them the latest one stands for it, and the full pass before them (whose mark
        was kept) is older still, so the window is watched whole as early as with all of them.
        Constant time per carried pass, instead of one mark per model."""
        self._carried = (snapshot, plan, at)

    def record_carried(self) -> None:
        if self._carried is not None:
            snapshot, plan, at = self._carried
            self._carried = None
            self._remember(snapshot.model_copy(update={"now": at}), plan)

    def expires(self, snapshot: Snapshot, refusals_end: list[datetime]) -> datetime | None:
        """When what the builder carries by itself next runs out after the snapshot's now: a
        deleted demand key's last value (kept for eviction_grace_s), a spot Nomad refused
        (held for a while). A pass carried over must not outlive it (a build would differ)."""
        grace = timedelta(seconds=snapshot.settings.eviction_grace_s)
        ends = [since + grace for since, _ in self.gone.demand.values()]
        ends += self.gateway_demand.expires(snapshot.settings.eviction_grace_s)
        ends += refusals_end
        return min((t for t in ends if t > snapshot.now), default=None)

    def _remember(self, snapshot: Snapshot, plan: Plan) -> None:
        for m in snapshot.models:
            status = plan.models.get(m.name)
            if status is None or status.recommended is None:
                continue
            self.marks[m.name] = remember(
                self.marks.get(m.name, []),
                snapshot.now,
                status.recommended,
                window_of(m, snapshot.settings),
            )
        names = {m.name for m in snapshot.models}
        self.marks = {k: v for k, v in self.marks.items() if k in names}
        self.seen = {k: v for k, v in self.seen.items() if k in names}

    def track_profiles(
        self, models: list[Model], saved: Gone, held: set[tuple[str, str]], now: datetime
    ) -> dict[str, dict[str, datetime]]:
        """Since when replicas of a profile no longer in their model run (the earlier of what
        the state key kept and this process saw); forgotten once the profile is back or none
        of its replicas is left. Models not in the catalog are not looked at."""
        have = {m.name: {p.name for p in m.profiles} for m in models}
        for name, profiles in saved.profiles.items():
            mine = self.gone.profiles.setdefault(name, {})
            for profile, since in profiles.items():
                mine[profile] = min(since, mine.get(profile, since))
        removed = {(n, p) for n, p in held if n in have and p not in have[n]}
        for name in list(self.gone.profiles):
            mine = self.gone.profiles[name]
            for profile in list(mine):
                if (name, profile) not in removed:
                    del mine[profile]
            if not mine:
                del self.gone.profiles[name]
        for name, profile in sorted(removed):
            mine = self.gone.profiles.setdefault(name, {})
            if profile not in mine:
                mine[profile] = now
                log.warning("profile_removed", model=name, profile=profile)
        return {k: dict(v) for k, v in self.gone.profiles.items()}

    def track_gone(
        self,
        cat: Catalog,
        models: list[Model],
        saved: Gone,
        running: set[str],
        now: datetime,
        has_state: bool,
    ) -> dict[str, datetime]:
        """Remember what went missing; carry a deleted demand key's last value for
        eviction_grace_s; list models whose key was deleted while replicas of theirs run."""
        for name, since in saved.models.items():
            self.gone.models[name] = min(since, self.gone.models.get(name, since))
        for name, (since, last) in saved.demand.items():
            if name not in self.gone.demand or since < self.gone.demand[name][0]:
                self.gone.demand[name] = (since, last)
        known = {m.name for m in models} | cat.bad_models
        # Demand: missing is not zero.
        seen = dict(cat.demand)
        grace = (cat.settings or Settings()).eviction_grace_s
        for name in list(self.gone.demand):
            if name in seen or name not in known:
                del self.gone.demand[name]
        for name in sorted(known - seen.keys()):
            if name not in self.gone.demand and name in self.seen_demand:
                self.gone.demand[name] = (now, self.seen_demand[name])
            if name in self.gone.demand:
                since, last = self.gone.demand[name]
                if (now - since).total_seconds() < grace:
                    cat.demand[name] = last
        self.seen_demand = seen
        # Models: a deleted key retires the model, after retire_grace_s (in the core).
        for name in list(self.gone.models):
            if name in known or name not in running:
                del self.gone.models[name]  # back, or nothing of it left
        if not known and not has_state:
            # No model key and no state key of ours while replicas run: a wiped Consul or a
            # wrong prefix, not an operator retiring models; retire nothing.
            return {}
        for name in sorted(running - known):
            if name not in self.gone.models:
                self.gone.models[name] = now
                log.warning("model_retiring", model=name, reason="its key was deleted")
        return dict(self.gone.models)
