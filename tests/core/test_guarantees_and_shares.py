"""Quotas and fair sharing: what a guarantee protects, who is served first, how what is
past the guarantees is shared, and replicas of a removed profile."""

from __future__ import annotations

from typing import Any

from preemption_snapshots import (
    live_per_model,
    model,
    node,
    replica,
    run,
    snap,
    stops,
)

from scheduler.core.decide import decide
from scheduler.core.models import Snapshot
from scheduler.core.simulate import apply_plan


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
    # so b-new makes room from its own owner's replicas; and a-old, below its fair share,
    # takes one of org/b's toward it (rule R7): 2 and 2.
    took = stops(decide(_same_class(a_holds=1)))
    assert [(a.model, a.preempted_for) for a in took] == [("b-old", "b-new"), ("b-old", "a-old")]


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
