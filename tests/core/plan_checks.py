"""Properties every plan keeps (docs/decision-core.md rules), checked on one snapshot and
its plan: devices, node resources, quotas, stops."""

from __future__ import annotations

import math

from plan_index import Index, being_replaced
from scenario_gen import EPS
from scenario_runs import starts_of, stops_of

from scheduler.core.facts import mig_fraction
from scheduler.core.inventory import owner_prefixes, profile_need
from scheduler.core.models import (
    CLASS_RANK,
    Model,
    Plan,
    Profile,
    Replica,
    Snapshot,
    StopAction,
)


def retired(a: StopAction) -> bool:
    """Stopped whatever the demand: stuck starting past its load grace."""
    return a.code == "timed_out"


def held_profile(m: Model, name: str) -> Profile:
    """The profile a replica runs; for one since removed from its model, what the core
    reckons it holds (facts.shard_held): the most any profile of the model asks (its GPUs
    are read from its devices)."""
    prof = m.profile(name)
    if prof is not None:
        return prof
    return Profile(
        name=name,
        cpu_cores=max(p.cpu_cores for p in m.profiles),
        memory_gb=max(p.memory_gb for p in m.profiles),
    )


def device_gpus(idx: Index, dev: str) -> float:
    """What a held device counts against quotas: a whole GPU, or its slice's fraction."""
    if dev in idx.slices:
        return mig_fraction(idx.slices[dev][2].profile)
    return 1.0


# ---------------------------------------------------------------- properties of one plan


def floor(m: Model, plan: Plan) -> int:
    """How low a model may go: its min, or 0 when it is on demand, idle, and wants 0."""
    if m.scaling.on_demand and plan.models[m.name].desired == 0:
        return 0
    return m.scaling.min


def check_devices(snap: Snapshot, plan: Plan) -> None:
    """P1: each device given once, never one any snapshot replica holds, and only a fit one."""
    idx = Index.of(snap)
    held = {d for r in snap.replicas for s in r.shards for d in s.gpus}
    given: set[str] = set()
    for a in starts_of(plan):
        model = idx.models[a.model]
        prof = model.profile(a.profile)
        assert prof is not None, f"{a.replica}: unknown profile {a.profile}"
        assert len(a.shards) == prof.shards
        assert len({s.node for s in a.shards}) == prof.shards, "shards must be on distinct nodes"
        for sh in a.shards:
            node = idx.nodes[sh.node]
            assert node.eligible, f"{a.replica} placed on ineligible node {node.id}"
            for dev in sh.gpus:
                assert dev not in given, f"{dev} given twice in one plan"
                assert dev not in held, f"{dev} given while a replica in the snapshot holds it"
                given.add(dev)
            if prof.mig_profile is not None:
                assert len(sh.gpus) == 1, "a MIG start takes exactly one slice"
                assert sh.gpus[0] in idx.slices, f"{sh.gpus[0]} is not a MIG slice"
                snode, parent, sl = idx.slices[sh.gpus[0]]
                assert snode.id == node.id
                assert sl.profile == prof.mig_profile
                assert sl.healthy and parent.healthy, f"unhealthy slice {sl.id} given"
                continue
            assert len(sh.gpus) == prof.gpus
            for dev in sh.gpus:
                assert dev in idx.gpus, f"{dev} is not a whole GPU"
                gnode, gpu = idx.gpus[dev]
                assert gnode.id == node.id
                assert gpu.healthy, f"unhealthy GPU {dev} given"
                assert gpu.mig is None, f"GPU {dev} in MIG mode given whole"
                if prof.gpu_models:
                    assert any(w in gpu.model for w in prof.gpu_models)
                if prof.gpu_memory_gb is not None:
                    assert gpu.memory_gb + EPS >= prof.gpu_memory_gb


def check_node_resources(snap: Snapshot, plan: Plan) -> None:
    """P2: CPU and memory of a node: every snapshot replica (stopping too) plus starts fit."""
    idx = Index.of(snap)
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}

    def hold(model: str, profile: str, nodes: list[str]) -> None:
        prof = held_profile(idx.models[model], profile)
        for n in nodes:
            cpu[n] = cpu.get(n, 0.0) + prof.cpu_cores
            mem[n] = mem.get(n, 0.0) + prof.memory_gb

    for r in snap.replicas:
        hold(r.model, r.profile, [s.node for s in r.shards])
    before = (dict(cpu), dict(mem))
    for a in starts_of(plan):
        hold(a.model, a.profile, [s.node for s in a.shards])
    for nid, node in idx.nodes.items():
        for name, used, was, cap in (
            ("cpu_cores", cpu, before[0], node.cpu_cores),
            ("memory_gb", mem, before[1], node.memory_gb),
        ):
            assert was.get(nid, 0.0) <= cap + EPS, f"generator: input overcommits {nid} {name}"
            assert used.get(nid, 0.0) <= cap + EPS, f"{nid} {name} overcommitted"


def check_quotas(snap: Snapshot, plan: Plan) -> None:
    """P3: usage (all snapshot replicas, by the devices they hold) plus starts within limits."""
    idx = Index.of(snap)
    usage: dict[str, list[float]] = {}

    def charge(owner: str, amount: tuple[float, float, float]) -> None:
        for p in owner_prefixes(owner):
            u = usage.setdefault(p, [0.0, 0.0, 0.0])
            for i in range(3):
                u[i] += amount[i]

    for r in snap.replicas:
        model = idx.models[r.model]
        prof = held_profile(model, r.profile)
        gpus = sum(device_gpus(idx, d) for s in r.shards for d in s.gpus)
        n = len(r.shards)
        charge(model.owner, (gpus, prof.cpu_cores * n, prof.memory_gb * n))
    before = {p: list(u) for p, u in usage.items()}
    for a in starts_of(plan):
        model = idx.models[a.model]
        prof = model.profile(a.profile)
        assert prof is not None
        charge(model.owner, profile_need(prof))
        # What the start holds must be what profile_need says it counts.
        held = sum(device_gpus(idx, d) for s in a.shards for d in s.gpus)
        assert math.isclose(held, profile_need(prof)[0])
    for q in snap.quotas:
        if q.limit is None:
            continue
        caps = (q.limit.gpus, q.limit.cpu_cores, q.limit.memory_gb)
        now_u = usage.get(q.owner, [0.0, 0.0, 0.0])
        was_u = before.get(q.owner, [0.0, 0.0, 0.0])
        for i, cap in enumerate(caps):
            if cap is None:
                continue
            assert now_u[i] <= max(cap, was_u[i]) + EPS, (
                f"quota {q.owner} dim {i}: {was_u[i]} -> {now_u[i]} past limit {cap}"
            )


def guaranteed_prefix(owner: str, idx: Index) -> tuple[str, tuple[float, float, float]] | None:
    """The most specific quota on the owner's path that guarantees anything."""
    quotas = {q.owner: q for q in idx.snap.quotas}
    for prefix in reversed(owner_prefixes(owner)):
        q = quotas.get(prefix)
        g = q.guarantee if q else None
        if g is not None and (g.gpus, g.cpu_cores, g.memory_gb) != (None, None, None):
            # An unset dimension is not constrained.
            return prefix, tuple(
                math.inf if v is None else v for v in (g.gpus, g.cpu_cores, g.memory_gb)
            )  # type: ignore[return-value]
    return None


def borrowed_ids(idx: Index) -> set[str]:
    """Live replicas past their owner's guarantee (the newest go past first); with no
    guarantee anywhere up the owner's path, all of them."""
    out: set[str] = set()
    by_prefix: dict[str, list[Replica]] = {}
    for r in idx.snap.replicas:
        if not r.counts:
            continue
        g = guaranteed_prefix(idx.models[r.model].owner, idx)
        if g is None:
            out.add(r.id)
        else:
            by_prefix.setdefault(g[0], []).append(r)
    for prefix, reps in by_prefix.items():
        g = guaranteed_prefix(prefix, idx)
        assert g is not None
        total = [0.0, 0.0, 0.0]
        for r in sorted(reps, key=lambda r: (r.created_at, r.id)):
            prof = idx.models[r.model].profile(r.profile)
            # A removed profile's replica asks nothing of a guarantee (facts: need ZERO).
            need = profile_need(prof) if prof is not None else (0.0, 0.0, 0.0)
            for i, v in enumerate(need):
                total[i] += v
            if any(t > c + EPS for t, c in zip(total, g[1], strict=True)):
                out.add(r.id)
    return out


def check_stops(snap: Snapshot, plan: Plan) -> list[tuple[str, str]]:
    """P4 and P5: stops are sound; critical minimums kept; victims follow the rules.
    Returns (victim model, preempted for) pairs."""
    idx = Index.of(snap)
    stops = stops_of(plan)
    stopped_per_model: dict[str, int] = {}  # distinct replicas (see check_stopped_once)
    # A replica stuck starting past its load grace never served, and one on an unhealthy
    # device goes once replaced or not serving: stopping either takes nothing from a minimum.
    for rid in {a.replica for a in stops if not retired(a) and a.code != "unhealthy_gpu"}:
        model = idx.replicas[rid].model if rid in idx.replicas else ""
        stopped_per_model[model] = stopped_per_model.get(model, 0) + 1
    yielded: dict[str, set[str]] = {}
    for a in stops:
        if a.preempted_for is not None:
            yielded.setdefault(a.model, set()).add(a.preempted_for)
    per_preemptor: dict[str, int] = {}
    borrowed = borrowed_ids(idx)
    awaiting = {r.preempted_for for r in snap.replicas if r.preempted_for and not r.counts}
    pairs: list[tuple[str, str]] = []
    for a in stops:
        assert a.reason.strip(), "a stop without a reason"
        r = idx.replicas.get(a.replica)
        assert r is not None, f"stop of unknown replica {a.replica}"
        assert r.model == a.model
        assert r.counts, f"{r.id} is already stopping"
        if a.preempted_for is None:
            continue
        pf = idx.models.get(a.preempted_for)
        assert pf is not None, f"preempted for {a.preempted_for}, not in the catalog"
        assert pf.name not in awaiting, f"{pf.name} preempts again while its victims stop"
        _check_victim(snap, plan, idx, r, pf, borrowed, yielded)
        per_preemptor[pf.name] = per_preemptor.get(pf.name, 0) + 1
        pairs.append((r.model, pf.name))
    _check_victims_per_preemptor(snap, plan, idx, per_preemptor)
    _check_critical_minimums(plan, idx, stops, stopped_per_model)
    _check_same_class(snap, plan, idx, pairs, stopped_per_model)
    return pairs


def _check_victim(
    snap: Snapshot,
    plan: Plan,
    idx: Index,
    r: Replica,
    pf: Model,
    borrowed: set[str],
    yielded: dict[str, set[str]],
) -> None:
    """One preempted replica: whom it may give way to, when, and that it is held after."""
    victim_model = idx.models[r.model]
    assert pf.name != r.model, "a model preempted itself"
    assert r.preempted_for is None, "victim already preempted"
    if snap.quotas and pf.owner != victim_model.owner:
        # A replica within its owner's guarantee is taken only for a model of that owner.
        assert r.id in borrowed, f"{r.id} of {victim_model.owner} is within its guarantee"
    if CLASS_RANK[pf.class_] < CLASS_RANK[victim_model.class_]:
        # Only a guarantee reclaiming a borrowed replica of another owner ignores classes.
        assert snap.quotas and pf.owner != victim_model.owner and r.id in borrowed, (
            f"{r.model} ({victim_model.class_}) preempted for {pf.name} ({pf.class_})"
        )
    if len({s.node for s in r.shards}) > 1:
        # A multi-node replica gives way as a whole, and only to a higher class.
        assert CLASS_RANK[pf.class_] > CLASS_RANK[victim_model.class_], (
            f"multi-node {r.id} ({victim_model.class_}) preempted for {pf.name}"
        )
    if r.ready_at is not None:
        age = (snap.now - r.ready_at).total_seconds()
        assert age >= snap.settings.min_lifetime_s, f"{r.id} preempted {age}s after ready"
    # Held for a model it yielded to (one record per model: the last one it yielded to).
    hold = plan.holds.get(r.model)
    assert hold is not None and hold.for_ in yielded[r.model], f"{r.model} not held"
    assert hold.until >= snap.now


def _check_victims_per_preemptor(
    snap: Snapshot, plan: Plan, idx: Index, per_preemptor: dict[str, int]
) -> None:
    cfg = snap.settings
    for name, n in per_preemptor.items():
        # At most max_victims per placement: per replica the preemptor is still missing.
        st_ = plan.models[name]
        # Replicas being replaced (see being_replaced) are missing too.
        live = st_.live - len(being_replaced(snap, idx, idx.models[name], st_.desired))
        cap = cfg.max_victims * max(st_.desired - live, 0)
        assert n <= cap, f"{n} victims for {name} (max {cfg.max_victims} per missing replica)"


def _check_critical_minimums(
    plan: Plan, idx: Index, stops: list[StopAction], stopped_per_model: dict[str, int]
) -> None:
    for name, n in stopped_per_model.items():
        m = idx.models[name]
        live = len(idx.live(name))
        if m.class_ == "critical":
            # Its minimum is never taken; only the model itself, idle and on demand, wants 0.
            if floor(m, plan) == 0 < m.scaling.min:
                preempted = [a for a in stops if a.model == name and a.preempted_for]
                assert len(preempted) <= max(live - m.scaling.min, 0), f"{name} min preempted"
            assert n <= max(live - floor(m, plan), 0), f"critical {name}: minimum stopped"


def _check_same_class(
    snap: Snapshot,
    plan: Plan,
    idx: Index,
    pairs: list[tuple[str, str]],
    stopped_per_model: dict[str, int],
) -> None:
    """Within a class, only from above the victim's minimum, for a model below its own."""
    for victim, pf_name in pairs:
        vm, pf = idx.models[victim], idx.models[pf_name]
        same_owner_or_no_quotas = not snap.quotas or vm.owner == pf.owner
        if vm.class_ == pf.class_ and same_owner_or_no_quotas:
            # A replica on an unhealthy device no longer counts (it is being replaced).
            counted = len(idx.live(pf_name)) - len(idx.sick(pf_name))
            assert counted < pf.scaling.min, f"{pf_name} took from its own class"
            left = len(idx.live(victim)) - stopped_per_model[victim]
            assert left >= floor(vm, plan), f"{victim} stopped below min for its own class"


def check_stopped_once(plan: Plan) -> None:
    """No replica is stopped twice in one plan (say, preempted and then scaled down)."""
    stops = stops_of(plan)
    seen: dict[str, str] = {}
    for a in stops:
        assert a.replica not in seen, f"{a.replica}: {seen[a.replica]!r}, then {a.reason!r}"
        seen[a.replica] = a.reason
