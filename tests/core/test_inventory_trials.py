"""Trials on clones of the inventory never change the inventory they were cloned from, and a
clone's own index always files each node where its free devices say."""

from __future__ import annotations

import copy
import random

import pytest

from bench.fleetgen import steady_snapshot
from scheduler.core.facts import collect
from scheduler.core.inventory import Inventory
from scheduler.core.models import Model, Profile

Filed = tuple[dict[int, list[str]], dict[tuple[int, int], list[str]], dict[str, list[str]]]


def _index(inv: Inventory) -> Filed:
    inv._materialize()
    free = {k: sorted(v) for k, v in inv.index.by_free.items() if v}
    kind = {k: sorted(v) for k, v in inv.index.by_kind.items() if v}
    sliced = {k: sorted(v) for k, v in inv.index.by_slice.items() if v}
    return free, kind, sliced


def _expected(inv: Inventory) -> Filed:
    free: dict[int, list[str]] = {}
    kind: dict[tuple[int, int], list[str]] = {}
    sliced: dict[str, list[str]] = {}
    for nid, ns in inv.nodes.items():
        if not ns.node.eligible:
            continue
        if ns.free_gpus:
            free.setdefault(len(ns.free_gpus), []).append(nid)
            kind.setdefault((len(ns.free_gpus), ns.kind), []).append(nid)
        for prof, lst in ns.free_slices.items():
            if lst:
                sliced.setdefault(prof, []).append(nid)
    return (
        {k: sorted(v) for k, v in free.items()},
        {k: sorted(v) for k, v in kind.items()},
        {k: sorted(v) for k, v in sliced.items()},
    )


def _walks_agree(inv: Inventory, profile: Profile) -> None:
    """A walk restricted to some kinds meets their nodes in the order of the whole walk (it
    may meet others too, where most of a count's nodes are of those kinds), and skips some."""
    whole = list(inv.candidate_nodes(profile))
    skipped = False
    for kinds in (frozenset({0}), frozenset({1, 2}), frozenset(range(0, len(inv.kinds), 2))):
        mine = [nid for nid in whole if inv.nodes[nid].kind in kinds]
        walked = list(inv.candidate_nodes(profile, kinds))
        assert [nid for nid in walked if inv.nodes[nid].kind in kinds] == mine
        assert set(walked) <= set(whole)
        skipped = skipped or len(walked) < len(whole)
    assert skipped, "no walk skipped a node: the test proves nothing"
    assert list(inv.candidate_nodes(profile, frozenset(range(len(inv.kinds))))) == whole


def _states(inv: Inventory) -> list[tuple[str, list[str], float, float, int, dict[str, int]]]:
    """Every node's state, in the inventory's order."""
    return [
        (nid, [g.id for g in ns.free_gpus], ns.free_cpu, ns.free_mem, ns.used_units, ns.per_model)
        for nid, ns in inv.nodes.items()
    ]


def test_trials_leave_the_parent_alone_and_keep_their_own_index_right() -> None:
    snap = steady_snapshot(60, seed=0)
    inv = Inventory.build(snap)
    before = copy.deepcopy(_index(inv))
    states = copy.deepcopy(_states(inv))
    assert before == _expected(inv)
    replicas = [r for r in snap.replicas if r.state == "running" and len(r.shards) == 1]
    model = next(m for m in snap.models if m.profiles[0].gpus == 1 and m.profiles[0].shards == 1)
    one = Model.model_validate(
        {**model.model_dump(by_alias=True), "profiles": [Profile(name="one", gpus=1)]}
    )
    trial = inv.clone()
    for r in replicas[:5]:
        trial.release(r.id)
    list(trial.candidate_nodes(one.profiles[0]))  # a walk: the trial's own index now
    trial_states = copy.deepcopy(_states(trial))
    nested = trial.clone()
    for r in replicas[5:12]:
        nested.release(r.id)
    for ns in list(nested.nodes.values())[:20]:
        if ns.free_gpus and ns.free_cpu >= 1 and ns.free_mem >= 1:
            nested.take(one, one.profiles[0], ns.node.id, [ns.free_gpus[0].id])
    assert _index(nested) == _expected(nested)
    assert _index(trial) == _expected(trial)
    for inventory in (inv, trial, nested):
        for profile in (one.profiles[0], Profile(name="two", gpus=2, shards=2)):
            _walks_agree(inventory, profile)
    assert _index(inv) == before, "a trial changed the inventory it was cloned from"
    assert _index(nested) != before, "the trials changed nothing: the test proves nothing"
    # The node states alike (a clone shares its parent's until it changes one: NodeMap).
    assert _states(inv) == states and _states(trial) == trial_states
    assert _states(nested) != trial_states != states
    assert [nid for nid, _ in nested.nodes.items()] == [nid for nid, _ in inv.nodes.items()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_walk_over_replicas_does_not_depend_on_their_order(seed: int) -> None:
    """collect() looks a model's lists up again only when the model changes from one replica
    to the next: replicas in any order give each model its own, in snapshot order."""
    snap = steady_snapshot(40, seed=0)
    replicas = list(snap.replicas)
    random.Random(seed).shuffle(replicas)
    walked = collect(snap.model_copy(update={"replicas": replicas}))
    models = {m.name: m for m in snap.models}

    def of(name: str, current: bool) -> list[str]:
        return [
            r.id
            for r in replicas
            if r.model == name
            and r.counts
            and name in models
            and (models[name].profile(r.profile) is not None) == current
        ]

    names = {r.model for r in replicas}
    assert {n: [r.id for r in rs] for n, rs in walked.by_model.items()} == {
        n: [r.id for r in replicas if r.model == n] for n in names
    }
    assert {n: [r.id for r in rs] for n, rs in walked.current.items()} == {
        n: of(n, True) for n in names if of(n, True)
    }
    assert {n: [r.id for r in rs] for n, rs in walked.stale.items()} == {
        n: of(n, False) for n in names if of(n, False)
    }
    held = {n: set(profiles) for n, profiles in walked.profiles_held.items()}
    assert held == {n: {r.profile for r in replicas if r.model == n} for n in names}
    assert all(len(set(p)) == len(p) for p in walked.profiles_held.values())
    assert [lr.id for lr in walked.live] == [
        r.id for r in replicas if r.counts and r.model in models
    ]
