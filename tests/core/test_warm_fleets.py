"""Rules W2 and W5 on generated fleets whose nodes report model caches (bench/fleetgen.py):
pass after pass, no replica starts on a cold node whose cache reports too little room for its
weights, and applying a plan leaves every cache as it was (nothing deletes weights)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.fleetgen import GB, steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.models import Snapshot, StartAction
from scheduler.core.simulate import apply_plan
from scheduler.core.warmth import Warmth


def _tight(snap: Snapshot, share: float, seed: int) -> Snapshot:
    """`share` of the nodes' caches report 0-100 GB free: less than many models' weights."""
    rng = random.Random(seed)
    nodes = []
    for n in snap.nodes:
        if n.cache is not None and rng.random() < share:
            cache = n.cache.model_copy(update={"free_bytes": rng.randrange(100) * GB})
            n = n.model_copy(update={"cache": cache})
        nodes.append(n)
    return snap.model_copy(update={"nodes": nodes})


@settings(max_examples=8, deadline=None)
@given(nodes=st.integers(8, 40), seed=st.integers(0, 10_000), share=st.floats(0, 1))
def test_no_start_lacks_cache_room_and_no_plan_deletes_weights(
    nodes: int, seed: int, share: float
) -> None:
    snap = _tight(steady_snapshot(nodes, seed=seed, caches=True), share, seed)
    caches = {n.id: n.cache for n in snap.nodes}
    for _ in range(3):
        plan = decide(snap)
        warmth = Warmth(snap.nodes)
        by_id = {n.id: n for n in snap.nodes}
        models = {m.name: m for m in snap.models}
        for a in plan.actions:
            if isinstance(a, StartAction):
                for sh in a.shards:
                    assert not warmth.lacks_room(models[a.model], by_id[sh.node]), (a, sh.node)
        snap = apply_plan(snap, plan, 60)
        assert {n.id: n.cache for n in snap.nodes} == caches
