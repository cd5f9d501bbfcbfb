"""The victim search: per node first, multi-node replicas as a whole, sentences naming the
rule, and the cheapest set against brute force on small instances."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
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
from scheduler.core.inventory import Inventory
from scheduler.core.models import Snapshot
from scheduler.core.placement import Placer
from scheduler.core.plugins import default_filters, default_scorers
from scheduler.core.preemption import Victim, VictimPool, choose, set_cost


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
