"""calm_until: before that instant the clock alone never changes a quiet
plan, so the service may carry it over without deciding again.

The property: for a plan without actions, decide(snapshot at any t in [now, calm_until))
equals decide(snapshot), all of it (statuses, holds, advice). A late calm_until is a bug the
property finds; an early one only costs a full pass. Checked by hand against planted bugs
(each threshold of calm.py dropped in turn: holds, min_lifetime_s, eviction grace, the
scale-down window, the defragmentation turn): each one makes this test fail.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, note
from hypothesis import strategies as st

from scheduler.core.calm import calm_until
from scheduler.core.decide import decide
from scheduler.core.defragment import next_turn, turn_of
from scheduler.core.models import Plan, Snapshot
from scheduler.core.simulate import apply_plan
from scheduler.core.validate import parse_snapshot
from tests.core import preemption_snapshots as hand
from tests.core.scenario_gen import PROPS, T0, Scenario, scenarios, ts
from tests.core.scenario_runs import dump, passes, step

FAR = timedelta(days=30)  # "never": well past every grace the generators use


@st.composite
def quiet_snapshots(draw: st.DrawFn) -> tuple[Snapshot, Plan]:
    """A scenario's last snapshot, then plans applied until one has no actions (a settled
    fleet, as most service passes see it), with a scale-down window, a deleted model and
    future-dated uses sometimes, so every threshold of calm.py is exercised."""
    scn: Scenario = draw(scenarios())
    *_, (snap, plan) = passes(scn)
    window = draw(st.sampled_from([0, 120, 300]))
    data = dump(snap)
    data["settings"]["scale_down_window_s"] = window
    data["settings"]["consolidate_per_pass"] = draw(st.sampled_from([1, 0, 2]))
    if draw(st.booleans()) and data["models"]:
        gone = data["models"].pop()  # its key was deleted a while ago; replicas may remain
        ago = draw(st.sampled_from([0, 100, 590, 700]))
        data["retired"] = {gone["name"]: ts(snap.now - timedelta(seconds=ago))}
    if draw(st.booleans()):
        for d in data["demand"].values():  # a gateway's clock a little ahead
            if d.get("last_used") is not None:
                d["last_used"] = ts(snap.now + timedelta(seconds=draw(st.sampled_from([5, 61]))))
    snap = parse_snapshot(data)
    plan = decide(snap)
    for _ in range(8):
        if not plan.actions:
            break
        snap = step(snap, plan, draw(st.sampled_from([0.0, 10.0, 45.0, 200.0])), scn.slow_stops)
        plan = decide(snap)
    return snap, plan


def at(snap: Snapshot, t: datetime) -> Snapshot:
    return snap.model_copy(update={"now": t})


def instants(snap: Snapshot) -> list[datetime]:
    """Where a missed threshold would show: every instant in the snapshot plus every duration
    the settings and models name (paired blindly, not rule by rule, so that this test does
    not repeat calm.py's reading of the rules), and the next minute and second boundaries."""
    stamps = [snap.now, *(h.until for h in snap.holds.values()), *snap.retired.values()]
    for r in snap.replicas:
        stamps += [t for t in (r.created_at, r.ready_at, r.last_used_at) if t is not None]
    stamps += [d.last_used for d in snap.demand.values() if d.last_used is not None]
    stamps += [mk.at for marks in snap.recent_desired.values() for mk in marks]
    s = snap.settings
    spans = {0, s.eviction_grace_s, s.min_lifetime_s, s.preempt_hold_s, s.retire_grace_s}
    spans |= {s.scale_down_window_s}
    for m in snap.models:
        spans |= {m.load_grace_s + 1, m.scaling.scale_down_window_s or 0}
    minute = snap.now.replace(second=0, microsecond=0)
    out = {x + timedelta(seconds=d) for x in stamps for d in spans}
    out |= {minute + timedelta(minutes=k) for k in (1, 2)}
    out |= {snap.now.replace(microsecond=0) + timedelta(seconds=1)}
    return sorted(t for t in out if t > snap.now)


@PROPS
@given(quiet_snapshots(), st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4))
def test_a_quiet_plan_stays_the_same_until_calm_until(
    case: tuple[Snapshot, Plan], fractions: list[float]
) -> None:
    """Walked forward: from each calm_until on, as long as the plan there is still quiet, the
    next stretch is checked too, so every threshold gets its turn at being the nearest."""
    snap, plan = case
    checked = set(instants(snap))
    for _ in range(12):
        if plan.actions:
            return  # acting now: the service decides every pass
        until = calm_until(snap, plan)
        note(f"now {snap.now.isoformat()} calm_until {until}")
        end = until if until is not None else snap.now + FAR
        assert end > snap.now
        span = end - snap.now
        # Every instant where a threshold could be, just before the end, a few in between.
        times = [t for t in checked if snap.now < t < end]
        times += [end - timedelta(microseconds=1), *(snap.now + span * f for f in fractions)]
        for t in times:
            if snap.now <= t < end:
                later = decide(at(snap, t))
                assert later == plan, f"plan changed at {t.isoformat()} before {until}"
        if until is None:
            return
        snap = at(snap, until)
        plan = decide(snap)


def test_calm_until_names_the_next_threshold_not_a_later_one() -> None:
    """A hand-made case per threshold, so a dropped one fails by name, not only by chance."""
    base = {
        "now": ts(T0),
        "settings": {"eviction_grace_s": 300, "min_lifetime_s": 600, "scale_down_window_s": 0},
        "nodes": [
            {
                "id": "n1",
                "name": "a",
                "cpu_cores": 64,
                "memory_gb": 512,
                "gpus": [{"id": f"g{i}", "model": "H100", "memory_gb": 80} for i in range(2)],
            }
        ],
        "models": [
            {
                "name": "od",
                "owner": "org/a",
                "class": "standard",
                "scaling": {"min": 0, "max": 1, "on_demand": True},
                "profiles": [{"name": "one", "gpus": 1}],
            }
        ],
        "demand": {"od": {"inflight": 0, "last_used": ts(T0 - timedelta(seconds=60))}},
        "replicas": [
            {
                "id": "r-1",
                "model": "od",
                "profile": "one",
                "state": "running",
                "created_at": ts(T0 - timedelta(seconds=100)),
                "ready_at": ts(T0 - timedelta(seconds=90)),
                "shards": [{"node": "n1", "gpus": ["g0"]}],
            }
        ],
    }
    snap = parse_snapshot(base)
    plan = decide(snap)
    assert plan.actions == []
    # Used 60 s ago, grace 300 s: the replica goes at T0 + 240 s (before ready + 600 s).
    assert calm_until(snap, plan) == T0 + timedelta(seconds=240)
    assert decide(at(snap, T0 + timedelta(seconds=240))).actions != []
    # The sentence names the instant, so the plan is the same all the while.
    assert plan.models["od"].why == (
        "1 replica: on demand, used 2026-12-02T09:59:00Z (grace until 2026-12-02T10:04:00Z)"
    )
    assert decide(at(snap, T0 + timedelta(seconds=239))) == plan


def test_defragmentation_turn_changes_once_a_minute() -> None:
    t = T0 + timedelta(seconds=7)
    assert turn_of(t, 3) == turn_of(T0 + timedelta(seconds=59, microseconds=999_999), 3)
    assert next_turn(t) == T0 + timedelta(seconds=60)
    assert turn_of(next_turn(t), 3) != turn_of(t, 3)


def _edge(s: Snapshot) -> tuple[Plan, datetime]:
    """The quiet plan and its calm_until, checked on both sides of that instant."""
    plan = decide(s)
    assert plan.actions == []
    until = calm_until(s, plan)
    assert until is not None
    assert decide(at(s, until - timedelta(microseconds=1))) == plan
    assert decide(at(s, until)) != plan
    return plan, until


def test_a_hold_ends_at_its_instant() -> None:
    """a yielded to b; b waits for a's replica to stop: a is held until 10:01:40."""
    s = hand.snap(
        nodes=[hand.node("n1", 1)],
        models=[hand.model("a", "standard", "org/a"), hand.model("b", "critical", "org/b")],
        replicas=[
            hand.replica("r-a", "a", [("n1", ["n1-g0"])], state="stopping", preempted_for="b")
        ],
        holds={"a": {"until": "2026-12-02T10:01:40Z", "for": "b"}},
    )
    plan, until = _edge(s)
    assert until == T0 + timedelta(seconds=100)
    assert plan.models["a"].pending == "held until 2026-12-02T10:01:40Z after yielding to b"


def test_a_fresh_replica_may_give_way_at_min_lifetime() -> None:
    """b (critical) finds its only GPU held by a replica ready 100 s ago: min_lifetime_s 600."""
    ready = ts(T0 - timedelta(seconds=100))
    s = hand.snap(
        settings={"min_lifetime_s": 600, "scale_down_window_s": 0},
        nodes=[hand.node("n1", 1)],
        models=[
            hand.model("a", "opportunistic", "org/a"),
            hand.model("b", "critical", "org/b"),
        ],
        replicas=[hand.replica("r-a", "a", [("n1", ["n1-g0"])], ready_at=ready)],
    )
    _plan, until = _edge(s)
    assert until == T0 + timedelta(seconds=500)


def test_defragmentation_tries_the_next_waiting_model_at_the_next_turn() -> None:
    """x and y both wait for two GPUs of one node; moving c's replica off n1 would make room
    for y only. The turn decides which of them defragmentation tries: a minute each."""
    c = hand.model("c", "standard", "org/c", lo=1, hi=1)
    x = hand.model("x", "standard", "org/x", gpus=2)
    x["profiles"][0]["gpu_models"] = ["H200"]
    y = hand.model("y", "standard", "org/y", gpus=2)
    n2 = hand.node("n2", 1)
    n2["gpus"][0]["model"] = "NVIDIA A100-SXM4-80GB"
    base = hand.snap(
        nodes=[hand.node("n1", 2), n2],
        models=[c, x, y],
        replicas=[hand.replica("r-c", "c", [("n1", ["n1-g1"])])],
    )
    for minute in range(2):
        s = at(base, T0 + timedelta(minutes=minute, seconds=30))
        plan = decide(s)
        if not plan.actions:
            break
    assert not plan.actions, "y is tried first in both minutes"
    _plan, until = _edge(s)
    assert until == next_turn(s.now)


def test_the_mark_a_pass_hands_on_ends_the_calm_after_one_window() -> None:
    """Just restarted (no marks): a model with 2 replicas that wants 1 keeps 2 until the window
    has been watched whole. The mark this pass hands on (simulate.apply_plan keeps it, as the
    service does) makes the next pass a window later scale down: calm_until must not be later,
    though nothing in this snapshot alone changes then."""
    reps = [
        hand.replica(f"r-{i}", "m", [("n1", [f"n1-g{i}"])], ready_at=ts(T0 - timedelta(hours=2)))
        for i in range(2)
    ]
    s = hand.snap(
        settings={"scale_down_window_s": 300, "min_lifetime_s": 0},
        nodes=[hand.node("n1", 2)],
        models=[hand.model("m", "standard", "org/a", hi=2, target_per_replica=10)],
        replicas=reps,
        demand={"m": {"inflight": 5}},
    )
    plan = decide(s)
    assert plan.actions == [] and plan.models["m"].desired == 2
    assert calm_until(s, plan) == T0 + timedelta(seconds=300)
    later = apply_plan(s, plan, 300)  # the pass's own mark handed on, the clock at the end
    assert [a.op for a in decide(later).actions] == ["stop"]


def test_a_removed_profiles_replica_goes_at_the_end_of_the_retire_grace() -> None:
    """m's replica runs profile "old", removed 100 s ago; "p" finds no room beside it."""
    s = hand.snap(
        settings={"retire_grace_s": 600, "scale_down_window_s": 0},
        nodes=[hand.node("n1", 1)],
        models=[hand.model("m", "standard", "org/a", lo=1, hi=1)],
        replicas=[hand.replica("r-m", "m", [("n1", ["n1-g0"])], profile="old")],
        removed_profiles={"m": {"old": ts(T0 - timedelta(seconds=100))}},
    )
    _plan, until = _edge(s)
    assert until == T0 + timedelta(seconds=500)
