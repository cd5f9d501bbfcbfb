"""Issue 12: quotas, fair sharing and preemption that hold pass after pass.

Each failure the issue lists is pinned here as a hand-made snapshot."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decide import decide
from scheduler.core.inventory import Inventory
from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.core.placement import Placer
from scheduler.core.plugins import default_filters, default_scorers
from scheduler.core.preemption import Victim, VictimPool, choose, set_cost
from scheduler.core.simulate import apply_plan

NOW = "2026-12-02T10:00:00Z"
LONG_AGO = "2026-12-02T08:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"


def node(nid: str, gpus: int, cpu: float = 128, mem: float = 1024) -> dict[str, Any]:
    devs = [{"id": f"{nid}-g{i}", "model": H100, "memory_gb": 80} for i in range(gpus)]
    return {"id": nid, "name": nid, "cpu_cores": cpu, "memory_gb": mem, "gpus": devs}


def model(
    name: str,
    cls: str,
    owner: str,
    lo: int = 0,
    hi: int = 1,
    gpus: int = 1,
    shards: int = 1,
    cpu: float = 4,
    mem: float = 16,
    **scaling: Any,
) -> dict[str, Any]:
    prof = {"name": "p", "gpus": gpus, "shards": shards, "cpu_cores": cpu, "memory_gb": mem}
    return {
        "name": name,
        "owner": owner,
        "class": cls,
        "scaling": {"min": lo, "max": hi, "target_per_replica": 1, **scaling},
        "profiles": [prof],
    }


def replica(
    rid: str, name: str, shards: list[tuple[str, list[str]]], **extra: Any
) -> dict[str, Any]:
    return {
        "id": rid,
        "model": name,
        "profile": "p",
        "state": "running",
        "created_at": LONG_AGO,
        "ready_at": LONG_AGO,
        "shards": [{"node": n, "gpus": g} for n, g in shards],
        **extra,
    }


def snap(**body: Any) -> Snapshot:
    body.setdefault("now", NOW)
    models = body.get("models", [])
    body.setdefault("demand", {m["name"]: {"inflight": 100} for m in models})
    return Snapshot.model_validate(body)


def stops(plan: Plan) -> list[StopAction]:
    return [a for a in plan.actions if isinstance(a, StopAction)]


def starts(plan: Plan) -> list[StartAction]:
    return [a for a in plan.actions if isinstance(a, StartAction)]


def run(s: Snapshot, passes: int = 20, advance_s: float = 60) -> tuple[Snapshot, list[Plan]]:
    plans = []
    for _ in range(passes):
        plan = decide(s)
        plans.append(plan)
        s = apply_plan(s, plan, advance_s)
    return s, plans


def live_per_model(s: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in s.replicas:
        if r.counts:
            out[r.model] = out.get(r.model, 0) + 1
    return out


# ------------------------------------------------------------------ item 1


def test_a_gpu_only_guarantee_protects_replicas_that_also_use_cpu() -> None:
    # org/b is guaranteed 4 GPUs (as consul/kv-seed.yaml writes it) and holds 4 with CPU and
    # memory: nothing of it is borrowed, so another owner's critical model may not take it.
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("chat", "critical", "org/a", lo=1, gpus=4),
            model("batch", "opportunistic", "org/b", gpus=4),
        ],
        replicas=[replica("r-b", "batch", [("n1", ["n1-g0", "n1-g1", "n1-g2", "n1-g3"])])],
        quotas=[{"owner": "org/b", "guarantee": {"gpus": 4}}],
    )
    assert stops(decide(s)) == []


def test_a_gpu_only_guarantee_lets_its_owner_reclaim() -> None:
    # Within its GPU guarantee, org/b takes back what org/a borrowed, though its profile asks
    # for CPU the guarantee does not name.
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("chat", "standard", "org/a", gpus=4),
            model("batch", "standard", "org/b", lo=1, gpus=4),
        ],
        replicas=[replica("r-a", "chat", [("n1", ["n1-g0", "n1-g1", "n1-g2", "n1-g3"])])],
        quotas=[{"owner": "org/b", "guarantee": {"gpus": 4}}],
    )
    assert [(a.replica, a.preempted_for) for a in stops(decide(s))] == [("r-a", "batch")]


# ------------------------------------------------------------------ item 7


def test_scale_to_zero_waits_eviction_grace_for_min_zero() -> None:
    # Used 60 s ago, no load now, eviction_grace_s 300: the replica stays; at 301 s it goes.
    def at(ago: str) -> Snapshot:
        return snap(
            nodes=[node("n1", 1)],
            settings={"eviction_grace_s": 300},
            models=[model("od", "standard", "org/a", lo=0, hi=2, on_demand=True)],
            replicas=[replica("r-1", "od", [("n1", ["n1-g0"])])],
            demand={"od": {"inflight": 0, "last_used": ago}},
        )

    kept = decide(at("2026-12-02T09:59:00Z"))
    assert kept.actions == [] and kept.models["od"].desired == 1
    gone = decide(at("2026-12-02T09:54:59Z"))
    assert [a.replica for a in stops(gone)] == ["r-1"]


# ------------------------------------------------------------------ items 4, 5, 6


def test_victims_are_searched_per_node_not_fleet_wide() -> None:
    # Eight idle 1-GPU replicas on n1 come first in tier order, but max_victims (3) of them
    # never make room for 8 GPUs; the one 8-GPU replica on n2 does.
    models = [
        model("crit", "critical", "org/a", lo=1, gpus=8),
        model("small", "opportunistic", "org/b", hi=8),
        model("big", "opportunistic", "org/b", gpus=8),
    ]
    reps = [replica(f"r-s{i}", "small", [("n1", [f"n1-g{i}"])]) for i in range(8)]
    reps.append(replica("r-big", "big", [("n2", [f"n2-g{i}" for i in range(8)])]))
    s = snap(
        nodes=[node("n1", 8), node("n2", 8)],
        models=models,
        replicas=reps,
        demand={"crit": {"inflight": 1}, "small": {"inflight": 8}, "big": {"inflight": 1}},
    )
    plan = decide(s)
    assert [(a.replica, a.preempted_for) for a in stops(plan)] == [("r-big", "crit")]
    assert stops(plan)[0].reason == (
        "preempted for crit: lower class, above its minimum (opportunistic for critical)"
    )


def test_a_multi_node_replica_gives_way_as_a_whole_to_a_higher_class() -> None:
    # An opportunistic 2x8 eval run holds both nodes; a critical 8-GPU model is pending.
    s = snap(
        nodes=[node("n1", 8), node("n2", 8)],
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=8),
            model("eval", "opportunistic", "org/b", gpus=8, shards=2),
        ],
        replicas=[
            replica(
                "r-e",
                "eval",
                [("n1", [f"n1-g{i}" for i in range(8)]), ("n2", [f"n2-g{i}" for i in range(8)])],
            )
        ],
    )
    plan = decide(s)
    (stop,) = stops(plan)
    assert (stop.replica, stop.preempted_for) == ("r-e", "crit")
    assert stop.reason.endswith("; all 2 shards as one")
    # Then crit starts on one of the nodes, and eval (held) does not come back.
    after, _ = run(s, passes=6)
    assert live_per_model(after) == {"crit": 1}


def test_a_multi_node_replica_is_never_a_victim_for_its_own_class() -> None:
    s = snap(
        nodes=[node("n1", 8), node("n2", 8)],
        models=[
            model("want", "opportunistic", "org/a", lo=1, gpus=8),
            model("eval", "opportunistic", "org/a", gpus=8, shards=2),
        ],
        replicas=[
            replica(
                "r-e",
                "eval",
                [("n1", [f"n1-g{i}" for i in range(8)]), ("n2", [f"n2-g{i}" for i in range(8)])],
            )
        ],
    )
    assert stops(decide(s)) == []


def test_a_borrowed_victim_names_the_guarantee_it_was_borrowed_past() -> None:
    s = snap(
        nodes=[node("n1", 4)],
        models=[
            model("mine", "opportunistic", "org/a", lo=1, gpus=4),
            model("theirs", "critical", "org/b", gpus=4),
        ],
        replicas=[replica("r-t", "theirs", [("n1", [f"n1-g{i}" for i in range(4)])])],
        quotas=[
            {"owner": "org/a", "guarantee": {"gpus": 4}},
            {"owner": "org/b", "guarantee": {"gpus": 0}},
        ],
    )
    (stop,) = stops(decide(s))
    assert stop.reason == (
        "preempted for mine: borrowed past org/b's guarantee, reclaimed within org/a's guarantee"
    )


@st.composite
def victim_instances(draw: st.DrawFn) -> tuple[Snapshot, int]:
    """A few small nodes full of lower-class replicas (1, 2 or 4 GPUs, some 2-node), and a
    critical model that fits nowhere: room must be made."""
    n_nodes = draw(st.integers(1, 3))
    nodes = [node(f"n{i}", 4) for i in range(n_nodes)]
    free = {f"n{i}": [f"n{i}-g{j}" for j in range(4)] for i in range(n_nodes)}
    models = [
        model("s1", "opportunistic", "org/b", hi=12, gpus=1),
        model("s2", "standard", "org/b", hi=12, gpus=2),
        model("s4", "opportunistic", "org/b", hi=12, gpus=4),
        model("w2", "opportunistic", "org/b", hi=12, gpus=2, shards=2),
    ]
    reps: list[dict[str, Any]] = []
    for k in range(draw(st.integers(1, 8))):
        name = draw(st.sampled_from(["s1", "s1", "s2", "s4", "w2"]))
        size = {"s1": 1, "s2": 2, "s4": 4, "w2": 2}[name]
        hosts = [n for n, devs in free.items() if len(devs) >= size]
        if (name == "w2" and len(hosts) < 2) or not hosts:
            continue
        picked = draw(st.permutations(hosts))[: 2 if name == "w2" else 1]
        shards = []
        for h in picked:
            shards.append((h, free[h][:size]))
            free[h] = free[h][size:]
        reps.append(replica(f"r-{k}", name, shards))
    need = draw(st.sampled_from([1, 2, 3, 4]))
    shards = draw(st.sampled_from([1, 1, 2]))
    models.append(model("crit", "critical", "org/a", lo=1, gpus=need, shards=shards))
    # Fill what is left with 1-GPU replicas so that nothing fits without a victim.
    for h, devs in free.items():
        for d in devs:
            reps.append(replica(f"r-f{d}", "s1", [(h, [d])]))
    busy = {m["name"]: {"inflight": 100} for m in models}
    s = snap(nodes=nodes, models=models, replicas=reps, demand=busy)
    return s, draw(st.integers(1, 4))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(victim_instances())
def test_victim_search_matches_brute_force(inst: tuple[Snapshot, int]) -> None:
    s, max_victims = inst
    inv = Inventory.build(s)
    placer = Placer(default_filters(), default_scorers(), len(s.nodes))
    crit = next(m for m in s.models if m.name == "crit")
    assert placer.place(crit, inv).placement is None
    pool = VictimPool(s, inv, set())
    cands = list(pool.candidates(crit, inv, 0))

    def fits(gone: tuple[Victim, ...]) -> bool:
        trial = inv.clone()
        for v in gone:
            trial.release(v.replica.id)
        return placer.place(crit, trial, explain=False).placement is not None

    feasible = [c for k in range(1, max_victims + 1) for c in combinations(cands, k) if fits(c)]
    got = choose(crit, iter(cands), inv, max_victims, placer)
    if not feasible:
        assert got == []
        return
    assert got, f"a feasible victim set exists, none was found: {feasible[0]}"
    assert fits(tuple(got))
    best = min(set_cost(c) for c in feasible)
    if crit.profiles[0].shards == 1:
        assert set_cost(got) == best, (set_cost(got), best)
    else:
        assert len(got) <= max_victims


# ------------------------------------------------------------------ item 2


def _two_owners(**quota_extra: Any) -> Snapshot:
    return snap(
        nodes=[node("n1", 6)],
        models=[
            model("a-chat", "standard", "org/a", hi=6),
            model("b-chat", "standard", "org/b", hi=6),
        ],
        quotas=[
            {"owner": "org/a", "guarantee": {"gpus": 1}, **quota_extra},
            {"owner": "org/b", "guarantee": {"gpus": 1}},
        ],
    )


def test_the_borrowable_pool_is_shared_between_owners() -> None:
    # 6 GPUs, two owners guaranteed 1 each, both want 6: 3 and 3, not 6 for the first name.
    after, plans = run(_two_owners(), passes=4)
    assert live_per_model(after) == {"a-chat": 3, "b-chat": 3}
    assert all(a.op == "start" for p in plans for a in p.actions)


def test_the_pool_is_shared_by_weight() -> None:
    after, _ = run(_two_owners(weight=2), passes=4)
    # Weight 2 for org/a: it may borrow about twice what org/b does (3 past its 1, b 1).
    assert live_per_model(after) == {"a-chat": 4, "b-chat": 2}


def test_guarantees_are_served_across_owners_before_anyone_borrows() -> None:
    # org/a (its model sorts first, and is critical) is owed 2 and wants 6; org/b is owed 4.
    # Before: a-chat took all 6 free GPUs and org/b reclaimed 4 of them later.
    s = snap(
        nodes=[node("n1", 6)],
        models=[
            model("a-chat", "critical", "org/a", hi=6),
            model("b-chat", "opportunistic", "org/b", hi=4),
        ],
        quotas=[
            {"owner": "org/a", "guarantee": {"gpus": 2}},
            {"owner": "org/b", "guarantee": {"gpus": 4}},
        ],
    )
    after, plans = run(s, passes=6)
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 4}
    assert not [a for p in plans for a in stops(p)], "start-then-reclaim churn"


def _same_class(a_holds: int) -> Snapshot:
    # One 4-GPU node, full: org/a holds a_holds, org/b the rest; org/b's "b-new" is below its
    # minimum. Both owners only borrow (guarantee 0).
    reps = [replica(f"r-a{i}", "a-old", [("n1", [f"n1-g{i}"])]) for i in range(a_holds)]
    reps += [replica(f"r-b{i}", "b-old", [("n1", [f"n1-g{i}"])]) for i in range(a_holds, 4)]
    return snap(
        nodes=[node("n1", 4)],
        models=[
            model("a-old", "standard", "org/a", hi=4),
            model("b-old", "standard", "org/b", hi=4),
            model("b-new", "standard", "org/b", lo=1),
        ],
        replicas=reps,
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 0}}, {"owner": "org/b"}],
    )


def test_preemption_between_borrowers_moves_toward_the_fair_share() -> None:
    took = stops(decide(_same_class(a_holds=3)))
    assert [(a.model, a.preempted_for) for a in took] == [("a-old", "b-new")]
    # org/b already holds 3 of 4: taking org/a's last one would move away from fair share,
    # so b-new makes room from its own owner's replicas.
    took = stops(decide(_same_class(a_holds=1)))
    assert [(a.model, a.preempted_for) for a in took] == [("b-old", "b-new")]


# ------------------------------------------------------------------ item 7: removed profile


def _removed_profile(ready: bool = True) -> Snapshot:
    # r-old runs profile "gone" (2 GPUs, 48 cores) that the operator since removed; the model
    # now lists only "p" (1 GPU, 4 cores). The node has 64 cores.
    old = replica("r-old", "chat", [("n1", ["n1-g0", "n1-g1"])], profile="gone")
    old["shards"][0].update({"cpu_cores": 48, "memory_gb": 64})
    return snap(
        nodes=[node("n1", 4, cpu=64)],
        models=[
            model("chat", "standard", "org/a", lo=1, hi=1),
            model("other", "standard", "org/b", cpu=24),
        ],
        replicas=[old],
        demand={"chat": {"inflight": 1}, "other": {"inflight": 1}},
    )


def test_a_removed_profile_counts_by_what_its_allocation_holds_and_is_replaced() -> None:
    s = _removed_profile()
    plan = decide(s)
    # chat counts no replica of a current profile: one starts beside the old one (make
    # before break). "other" (24 cores) does not fit: the old replica still holds 48 of 64.
    assert [(a.model, a.op) for a in plan.actions] == [("chat", "start")]
    assert plan.models["chat"].live == 0
    assert plan.models["other"].pending is not None
    # Once the new one runs, the old one goes, and then "other" finds its room.
    s2 = apply_plan(s, plan, 60)
    plan2 = decide(s2)
    assert [(a.replica, a.reason) for a in stops(plan2)] == [
        ("r-old", "replaced: profile gone is no longer in the model")
    ]
    after, _ = run(apply_plan(s2, plan2, 60), passes=3)
    assert live_per_model(after) == {"chat": 1, "other": 1}


def test_a_removed_profile_without_allocation_sizes_counts_the_most_a_profile_asks() -> None:
    s = _removed_profile()
    data = s.model_dump(by_alias=True, mode="json")
    for sh in data["replicas"][0]["shards"]:
        sh.pop("cpu_cores"), sh.pop("memory_gb")
    data["models"][0]["profiles"].append(
        {"name": "big", "gpus": 1, "cpu_cores": 48, "memory_gb": 16}
    )
    plan = decide(Snapshot.model_validate(data))
    assert plan.models["other"].pending is not None  # 48 cores counted, not 0


def test_pending_says_when_max_victims_held_a_preemption_back() -> None:
    # Four 1-GPU opportunistic replicas fill the node; the critical model needs all 4 GPUs.
    s = snap(
        nodes=[node("n1", 4)],
        settings={"max_victims": 3},
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=4),
            model("small", "opportunistic", "org/b", hi=4),
        ],
        replicas=[replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])]) for i in range(4)],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 4}},
    )
    plan = decide(s)
    assert stops(plan) == []
    pending = plan.models["crit"].pending
    assert pending is not None
    assert pending.endswith("preempting would take up to 4 replicas, more than max_victims (3)")


# ------------------------------------------------------------------ item 6: min_lifetime_s, holds


def _young_victims(ready: list[str]) -> Snapshot:
    # One 2-GPU node full of opportunistic 1-GPU replicas ready at `ready`; a critical model
    # needs both GPUs. Default settings: min_lifetime_s 600, max_victims 3.
    return snap(
        nodes=[node("n1", 2)],
        models=[
            model("crit", "critical", "org/a", lo=1, gpus=2),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[
            replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])], ready_at=at)
            for i, at in enumerate(ready)
        ],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 2}},
    )


def test_pending_says_when_min_lifetime_held_a_preemption_back() -> None:
    # Both replicas that would make room became ready 5 and 2 minutes ago: nothing is
    # preempted, and pending names the rule, how many and from when.
    s = _young_victims(["2026-12-02T09:55:00Z", "2026-12-02T09:58:00Z"])
    plan = decide(s)
    assert stops(plan) == []
    pending = plan.models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 2 replicas that would make room became ready less than "
        "min_lifetime_s (600 s) ago; they may give way from 2026-12-02T10:08:00Z"
    ), pending
    # And it is true: at 10:08 (not before) they are preempted and crit starts.
    after, plans = run(s, passes=12, advance_s=60)
    first = next(i for i, p in enumerate(plans) if stops(p))
    assert first == 8  # 10:08:00
    assert [a.preempted_for for a in stops(plans[first])] == ["crit", "crit"]
    assert live_per_model(after) == {"crit": 1}


def test_min_lifetime_pending_counts_only_the_young_victims_needed() -> None:
    s = _young_victims([LONG_AGO, "2026-12-02T09:58:00Z"])
    pending = decide(s).models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 1 replica that would make room became ready less than "
        "min_lifetime_s (600 s) ago; it may give way from 2026-12-02T10:08:00Z"
    ), pending


def test_min_lifetime_pending_names_no_more_young_victims_than_needed() -> None:
    # Three young 1-GPU replicas fill the node; crit needs one GPU: one of them would do.
    s = snap(
        nodes=[node("n1", 3)],
        models=[
            model("crit", "critical", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=3),
        ],
        replicas=[
            replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])], ready_at="2026-12-02T09:58:00Z")
            for i in range(3)
        ],
        demand={"crit": {"inflight": 1}, "small": {"inflight": 3}},
    )
    pending = decide(s).models["crit"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: 1 replica that would make room became ready less than "
        "min_lifetime_s (600 s) ago; it may give way from 2026-12-02T10:08:00Z"
    ), pending


def test_no_held_back_sentence_when_young_victims_would_not_make_room_either() -> None:
    # The young replicas are a critical model's minimum: never victims, whatever their age,
    # so min_lifetime_s is not what holds crit back.
    s = _young_victims(["2026-12-02T09:55:00Z", "2026-12-02T09:58:00Z"])
    data = s.model_dump(by_alias=True, mode="json")
    data["models"][1]["class"] = "critical"
    data["models"][1]["scaling"]["min"] = 2
    pending = decide(Snapshot.model_validate(data)).models["crit"].pending
    assert pending is not None and "held back" not in pending


def test_pending_says_when_the_room_is_kept_for_another_models_preemption() -> None:
    # big (critical, 2 GPUs) preempted both replicas on n1; they are still stopping. chat
    # (standard, 1 GPU) would fit in their room, but that room is big's.
    s = snap(
        nodes=[node("n1", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
            model("opp", "opportunistic", "org/a", lo=1),
        ],
        replicas=[
            replica(
                f"r-{i}", "small", [("n1", [f"n1-g{i}"])], state="stopping", preempted_for="big"
            )
            for i in range(2)
        ],
        holds={"small": {"until": "2026-12-02T10:04:00Z", "for": "big"}},
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}, "opp": {"inflight": 1}},
    )
    plan = decide(s)
    assert plan.actions == []
    assert plan.models["big"].pending == "waiting for preempted replicas to stop"
    pending = plan.models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it still stopping)"
    ), pending
    # opp (opportunistic) could never have taken an opportunistic replica's room: no claim.
    opp = plan.models["opp"].pending
    assert opp is not None and "held back" not in opp


def test_room_stopping_for_a_model_that_has_what_it_wants_is_kept_for_nobody() -> None:
    # As above, but big runs on n2 already (it wants one): the room stopping on n1 is free
    # for whoever comes once it is gone, so no "kept for big".
    stopping = {"state": "stopping", "preempted_for": "big"}
    s = snap(
        nodes=[node("n1", 2), node("n2", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[
            replica("r-0", "small", [("n1", ["n1-g0"])], **stopping),
            replica("r-1", "small", [("n1", ["n1-g1"])], **stopping),
            replica("r-big", "big", [("n2", ["n2-g0", "n2-g1"])]),
        ],
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}},
    )
    pending = decide(s).models["chat"].pending
    assert pending is not None and "held back" not in pending, pending


def test_held_back_names_the_model_whose_room_would_do() -> None:
    # Replicas are stopping for two models: for big on n1 (2 GPUs), for one on n2 (1 GPU).
    # chat needs 2 GPUs: only big's room would do, and only big is named.
    stopping = {"state": "stopping"}
    s = snap(
        nodes=[node("n1", 2), node("n2", 1)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("one", "critical", "org/a", lo=1),
            model("chat", "standard", "org/a", lo=1, gpus=2),
            model("small", "opportunistic", "org/b", hi=3),
        ],
        replicas=[
            replica("r-0", "small", [("n1", ["n1-g0"])], **stopping, preempted_for="big"),
            replica("r-1", "small", [("n1", ["n1-g1"])], **stopping, preempted_for="big"),
            replica("r-2", "small", [("n2", ["n2-g0"])], **stopping, preempted_for="one"),
        ],
        demand={"big": {"inflight": 1}, "one": {"inflight": 1}, "chat": {"inflight": 1}},
    )
    pending = decide(s).models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it still stopping)"
    ), pending


def test_pending_says_when_the_room_went_to_a_preemption_in_the_same_pass() -> None:
    # Both models are missing; big (critical) preempts both opportunistic replicas first.
    # chat (standard) could have preempted one of them, but they are big's now.
    s = snap(
        nodes=[node("n1", 2)],
        models=[
            model("big", "critical", "org/a", lo=1, gpus=2),
            model("chat", "standard", "org/a", lo=1),
            model("small", "opportunistic", "org/b", hi=2),
        ],
        replicas=[replica(f"r-{i}", "small", [("n1", [f"n1-g{i}"])]) for i in range(2)],
        demand={"big": {"inflight": 1}, "chat": {"inflight": 1}, "small": {"inflight": 2}},
    )
    plan = decide(s)
    assert sorted((a.replica, a.preempted_for) for a in stops(plan)) == [
        ("r-0", "big"),
        ("r-1", "big"),
    ]
    pending = plan.models["chat"].pending
    assert pending is not None
    assert pending.endswith(
        "; held back: the room it would fit in is kept for big "
        "(2 replicas preempted for it in this pass)"
    ), pending


# ------------------------------------------------------------------ item 3: the cycles
#
# Each was found on the core before issue 12 (46cc66d) by running plan after plan with default
# settings (min_lifetime_s 600, preempt_hold_s 300) and one pass a minute; they are run here for
# long enough to see the old cycle come round at least twice.

FULL = {"cpu_cores": 128, "memory_gb": 1024}  # a guarantee that names every dimension


def turns(plans: list[Plan]) -> list[tuple[str, str]]:
    """(A, B) pairs where a replica of A was stopped for B after one of B was stopped for A."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in plans:
        for a in stops(p):
            if a.preempted_for is None:
                continue
            if (a.preempted_for, a.model) in seen:
                out.append((a.model, a.preempted_for))
            seen.add((a.model, a.preempted_for))
    return out


def live_each_pass(s: Snapshot, plans: list[Plan], name: str) -> list[int]:
    """The model's live replicas after each plan (starts and stops applied)."""
    out = []
    for p in plans:
        s = apply_plan(s, p, 60)
        out.append(live_per_model(s).get(name, 0))
    return out


def test_room_preempted_for_a_model_is_not_taken_by_a_third_every_11_minutes() -> None:
    # org/a may hold 2 GPUs and is guaranteed 2 (GPUs only, as consul/kv-seed.yaml writes it).
    # Before: std and batch, whose profiles ask no CPU or memory, counted as within the
    # guarantee (its unset CPU and memory taken as 0) and chat (memory 16) did not, so they
    # placed first: chat preempted std for the quota, batch took it the next pass, 10 minutes
    # later (min_lifetime_s) chat preempted batch, std took it, and so on every 11 minutes,
    # chat never starting. Now chat, the highest class, takes the quota in the first pass.
    s = snap(
        nodes=[node("n0", 2), node("n1", 4)],
        models=[
            model("std", "standard", "org/a", hi=4, cpu=0, mem=0),
            model("batch", "opportunistic", "org/a", lo=2, hi=3, gpus=2, cpu=0, mem=0),
            model("chat", "critical", "org/a", hi=4, gpus=2, cpu=0, mem=16),
        ],
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 2}, "limit": {"gpus": 2}}],
        demand={"std": {"inflight": 1}, "batch": {"inflight": 100}, "chat": {"inflight": 100}},
    )
    after, plans = run(s, passes=45)  # 45 minutes: the old cycle came round 4 times
    assert [a for p in plans for a in stops(p)] == []
    assert live_each_pass(s, plans, "chat") == [1] * 45
    assert live_per_model(after) == {"chat": 1}
    assert plans[-1].models["std"].pending is not None  # org/a's quota, named
    assert "quota limit of org/a" in plans[-1].models["std"].pending


def test_two_models_of_one_owner_do_not_take_turns_after_min_lifetime() -> None:
    # One owner, one class. org/a may hold 2 GPUs (guaranteed 2, GPUs only). chat is below
    # its minimum. Before: a and b (profiles asking no CPU or memory, so "within" the
    # guarantee whose unset dimensions counted as 0) placed ahead of chat; chat preempted a
    # for the quota, b took it; 10 minutes later chat preempted b, a took it: a and b took
    # turns every 11 minutes and chat never started. Now chat, below its minimum, goes first.
    s = snap(
        nodes=[node("n0", 2), node("n1", 2)],
        models=[
            model("a", "standard", "org/a", gpus=2, cpu=0, mem=0),
            model("b", "standard", "org/a", cpu=0, mem=0),
            model("chat", "standard", "org/a", lo=1, hi=2, gpus=2),
        ],
        quotas=[{"owner": "org/a", "guarantee": {"gpus": 2}, "limit": {"gpus": 2}}],
    )
    after, plans = run(s, passes=45)
    assert [a for p in plans for a in stops(p)] == []
    assert live_each_pass(s, plans, "chat") == [1] * 45
    assert live_per_model(after) == {"chat": 1}


def test_two_teams_of_one_org_do_not_take_turns_after_min_lifetime() -> None:
    # org/a/x and org/a/y are each guaranteed 2 GPUs of org/a's 4, on one 8-GPU node. Before:
    # y-chat filled the node; at 10 minutes x-batch (opportunistic, below its minimum)
    # reclaimed one of them within org/a/x's guarantee and x-chat took the other; at 21
    # minutes y-chat took x-batch's replica back: the two took turns, and x-batch, for which
    # y-chat had been preempted, ended with nothing. Now the guarantees are served first
    # and the rest shared: x-chat and y-chat start in the first pass and nothing is stopped.
    s = snap(
        nodes=[node("n0", 8)],
        models=[
            model("x-batch", "opportunistic", "org/a/x", lo=2, hi=4, gpus=2, mem=0),
            model("x-chat", "standard", "org/a/x", hi=4, on_demand=True),
            model("y-chat", "standard", "org/a/y", lo=1, hi=5, gpus=2, cpu=0, mem=0),
        ],
        quotas=[
            {"owner": "org/a/x", "guarantee": {"gpus": 2, **FULL}},
            {"owner": "org/a/y", "guarantee": {"gpus": 2, **FULL}},
            {"owner": "org/a", "guarantee": {"gpus": 4, **FULL}},
        ],
        demand={
            name: {"inflight": 100, "last_used": NOW} for name in ("x-batch", "x-chat", "y-chat")
        },
    )
    after, plans = run(s, passes=30)
    assert turns(plans) == []
    assert [a for p in plans for a in stops(p)] == []
    assert live_each_pass(s, plans, "x-chat") == [4] * 30
    assert live_per_model(after) == {"x-chat": 4, "y-chat": 2}


def test_guarantees_first_leaves_nothing_to_reclaim_after_min_lifetime() -> None:
    # The case of test_guarantees_are_served_across_owners_before_anyone_borrows with
    # guarantees that name every dimension, run past min_lifetime_s. Before: a-chat filled
    # all 6 GPUs in the first pass and 4 of them were reclaimed for b-chat 10 minutes later
    # (start-then-reclaim churn). Now b-chat's guaranteed share is never lent.
    s = snap(
        nodes=[node("n1", 6)],
        models=[
            model("a-chat", "critical", "org/a", hi=6),
            model("b-chat", "opportunistic", "org/b", hi=4),
        ],
        quotas=[
            {"owner": "org/a", "guarantee": {"gpus": 2, **FULL}},
            {"owner": "org/b", "guarantee": {"gpus": 4, **FULL}},
        ],
    )
    after, plans = run(s, passes=15)
    assert [a for p in plans for a in stops(p)] == []
    assert live_each_pass(s, plans, "b-chat") == [4] * 15
    assert live_per_model(after) == {"a-chat": 2, "b-chat": 4}


def test_a_replica_borrowed_by_cpu_alone_is_not_taken_and_reclaimed() -> None:
    # Found by LLM_SCHEDULER_HUNT=1500 (seed 27), on the core before issue 12 as well. org/a
    # is guaranteed 4 GPUs and 8 cores; a-chat runs two "big" replicas (2 GPUs, 8 cores
    # each): 16 cores, so the newer one is borrowed. b-crit (critical, org/b guaranteed 1 GPU)
    # takes it by class. a-chat, below its minimum and now within org/a's guarantee with its
    # "small" profile (1 GPU, no cores), takes one of b-crit's borrowed replicas back after
    # min_lifetime_s: b-crit and a-chat took turns (once; then it is quiet). Now a borrower
    # whose new replica could be taken back does not take what would bring its owner back
    # within its guarantee (rule R6).
    def rep(rid: str, name: str, prof: str, where: str, gpus: list[str]) -> dict[str, Any]:
        return replica(rid, name, [(where, gpus)], profile=prof)

    chat = model("a-chat", "standard", "org/a", lo=2, hi=2)
    chat["profiles"] = [
        {"name": "small", "gpus": 1, "cpu_cores": 0, "memory_gb": 0},
        {"name": "big", "gpus": 2, "cpu_cores": 8, "memory_gb": 0},
    ]
    s = snap(
        nodes=[node("n1", 3), node("n2", 3)],
        models=[chat, model("b-crit", "critical", "org/b", lo=1, hi=4, cpu=0, mem=0)],
        quotas=[
            {"owner": "org/b", "guarantee": {"gpus": 1}},
            {"owner": "org/a", "guarantee": {"gpus": 4, "cpu_cores": 8, "memory_gb": 64}},
        ],
        replicas=[
            rep("r-b", "b-crit", "p", "n1", ["n1-g0"]),
            rep("r-a1", "a-chat", "big", "n1", ["n1-g1", "n1-g2"]),
            rep("r-a2", "a-chat", "big", "n2", ["n2-g0", "n2-g1"]),
        ],
    )
    _, plans = run(s, passes=15)
    assert turns(plans) == []


def test_two_models_of_one_owner_reclaim_no_more_than_its_guarantee() -> None:
    # Found by LLM_SCHEDULER_HUNT=1500 (seed 33). org/a/x is guaranteed 2 GPUs; org/a's
    # big model fills the node, all of it borrowed. Before: x-chat (2 GPUs) and x-batch
    # (1 GPU) each judged org/a/x within its guarantee on the usage before the pass and both
    # reclaimed a replica of big: org/a/x ended past its guarantee, and 10 minutes later big
    # took x-batch's replica back (a turn). Now the replicas a model preempts for count for
    # its owner from that pass on: only x-chat reclaims.
    s = snap(
        nodes=[node("n0", 8)],
        models=[
            model("big", "standard", "org/a", hi=2, gpus=4),
            model("x-chat", "standard", "org/a/x", gpus=2),
            model("x-batch", "opportunistic", "org/a/x"),
        ],
        replicas=[
            replica("r-big0", "big", [("n0", [f"n0-g{i}" for i in range(4)])]),
            replica("r-big1", "big", [("n0", [f"n0-g{i}" for i in range(4, 8)])]),
        ],
        quotas=[{"owner": "org/a/x", "guarantee": {"gpus": 2}}],
    )
    first = decide(s)
    assert [a.preempted_for for a in stops(first)] == ["x-chat"]
    _, plans = run(s, passes=30)
    assert turns(plans) == []
    # The next pass, while r-big0 is still stopping: x-chat waits for it, and its replica
    # to come still counts for org/a/x, so x-batch reclaims nothing.
    data = s.model_dump(by_alias=True, mode="json")
    data["replicas"][0].update({"state": "stopping", "preempted_for": "x-chat"})
    second = decide(Snapshot.model_validate(data))
    assert stops(second) == []
    assert second.models["x-chat"].pending == "waiting for preempted replicas to stop"
