"""Trials on clones of the inventory never change the inventory they were cloned from, and a
clone's own index always files each node where its free devices say (issue 15: the index is
copied bucket by bucket, only where a trial changes it)."""

from __future__ import annotations

import copy

from bench.fleetgen import steady_snapshot
from scheduler.core.inventory import Inventory
from scheduler.core.models import Model, Profile


def _index(inv: Inventory) -> tuple[dict[int, list[str]], dict[str, list[str]]]:
    inv._materialize()
    free = {k: sorted(v) for k, v in inv.by_free.items() if v}
    sliced = {k: sorted(v) for k, v in inv.by_slice.items() if v}
    return free, sliced


def _expected(inv: Inventory) -> tuple[dict[int, list[str]], dict[str, list[str]]]:
    free: dict[int, list[str]] = {}
    sliced: dict[str, list[str]] = {}
    for nid, ns in inv.nodes.items():
        if not ns.node.eligible:
            continue
        if ns.free_gpus:
            free.setdefault(len(ns.free_gpus), []).append(nid)
        for prof, lst in ns.free_slices.items():
            if lst:
                sliced.setdefault(prof, []).append(nid)
    return {k: sorted(v) for k, v in free.items()}, {k: sorted(v) for k, v in sliced.items()}


def test_trials_leave_the_parent_alone_and_keep_their_own_index_right() -> None:
    snap = steady_snapshot(60, seed=0)
    inv = Inventory.build(snap)
    before = copy.deepcopy(_index(inv))
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
    nested = trial.clone()
    for r in replicas[5:12]:
        nested.release(r.id)
    for ns in list(nested.nodes.values())[:20]:
        if ns.free_gpus and ns.free_cpu >= 1 and ns.free_mem >= 1:
            nested.take(one, one.profiles[0], ns.node.id, [ns.free_gpus[0].id])
    assert _index(nested) == _expected(nested)
    assert _index(trial) == _expected(trial)
    assert _index(inv) == before, "a trial changed the inventory it was cloned from"
    assert _index(nested) != before, "the trials changed nothing: the test proves nothing"
