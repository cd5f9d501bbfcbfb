"""Which replicas are replaced make-before-break, besides those on draining nodes.

Rolling update: a replica whose spec (a digest of what it runs, from its job) differs from
what the model would start now, or whose profile the model no longer has. Consolidation: a
running replica on a worse placement than the model could have now (a later profile, or a
dearer one for `placement: cheapest`). Both go through the same replacement as a drain
(decide._Pass.replace): the replica stops counting as live, the model grows a replacement,
and the replica is stopped once enough others run.

Pure functions of the pass's data: what is "fresh", how many may be replaced at once.
"""

from __future__ import annotations

from scheduler.core.inventory import NodeState
from scheduler.core.models import Model, Profile, Replica
from scheduler.core.plugins import memory_suffices, model_matches

NO_PROFILE = 1 << 30  # rank of a replica whose profile the model no longer lists


def outdated(m: Model, reps: list[Replica], specs: dict[str, str] | None) -> list[Replica]:
    """Replicas that no longer run what the model says, oldest first. An unknown spec (a job
    written before digests, or no digest for the model) is never judged outdated."""
    if specs is None:
        return []
    out = []
    for r in reps:
        want = specs.get(r.profile)
        if m.profile(r.profile) is None or (want and r.spec and r.spec != want):
            out.append(r)
    return sorted(out, key=lambda r: (r.created_at, r.id))


def budget(counting: int, desired: int, surge: int, fresh_starting: int, old: int) -> int:
    """How many of `old` replicas to treat as being replaced in this pass.

    Those whose replacements exist already (`counting` above `desired`), plus as many new
    replacements as the surge allows beside the fresh replicas still starting. Recomputed
    each pass from the replicas alone, so nothing has to be remembered between passes.
    """
    covered = min(old, max(0, counting - desired))
    new = min(old - covered, max(0, surge - fresh_starting))
    return covered + new


def profile_rank(m: Model, profile: str) -> int:
    for i, p in enumerate(m.profiles):
        if p.name == profile:
            return i
    return NO_PROFILE


def serving_gpus(ns: NodeState, p: Profile, ids: list[str]) -> list[str]:
    """Which of `ids` on a node are whole GPUs the profile could use (model, memory, health)."""
    wanted = set(ids)
    return [
        g.id
        for g in ns.node.gpus
        if g.id in wanted
        and g.mig is None
        and g.healthy
        and model_matches(p, g.model)
        and memory_suffices(p, g.memory_gb)
    ]


def spot(ns: NodeState, p: Profile) -> list[str] | None:
    """The free GPUs a one-shard profile would take on this node now, or None."""
    if ns.free_cpu + 1e-9 < p.cpu_cores or ns.free_mem + 1e-9 < p.memory_gb:
        return None
    free = serving_gpus(ns, p, [g.id for g in ns.free_gpus])
    return free[: p.gpus] if len(free) >= p.gpus else None
