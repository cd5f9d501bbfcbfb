"""Placing one replica: quota check, filters per node, scorers, best node(s) per profile."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.inventory import Inventory, profile_need
from scheduler.core.models import Model, Profile, ProfileTrial, Shard
from scheduler.core.plugins import Choice, Filter, PlaceContext, Scorer, pick_gpus


@dataclass
class Placement:
    profile: Profile
    shards: list[Shard]


@dataclass
class Outcome:
    placement: Placement | None
    trials: list[ProfileTrial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _describe(p: Profile) -> str:
    if p.mig_profile is not None:
        return f"a free {p.mig_profile} slice"
    what = f"{p.gpus} free GPU{'s' if p.gpus != 1 else ''}"
    if p.gpu_models:
        what += " matching " + "/".join(p.gpu_models)
    if p.gpu_memory_gb is not None:
        what += f" with {p.gpu_memory_gb:g} GB"
    return what


def _try_node(
    ctx: PlaceContext, inv: Inventory, node_id: str, filters: list[Filter], scorers: list[Scorer]
) -> tuple[str | None, float, list[str]]:
    ns = inv.nodes[node_id]
    choice = Choice(gpus=list(ns.free_gpus))
    for f in filters:
        reason = f.filter(ctx, ns, choice)
        if reason is not None:
            return reason, 0.0, []
    if ctx.profile.is_mig:
        assert choice.slice is not None
        choice.picked = [choice.slice.id]
    else:
        choice.picked = [g.id for g in pick_gpus(choice.gpus, ctx.profile.gpus)]
    score = sum(s.score(ctx, ns, choice) for s in scorers)
    return None, score, choice.picked


def place_profile(
    model: Model,
    profile: Profile,
    inv: Inventory,
    filters: list[Filter],
    scorers: list[Scorer],
    explain: bool,
) -> tuple[Placement | None, ProfileTrial, str]:
    ctx = PlaceContext(model, profile)
    block = inv.quota_block(model.owner, profile_need(profile))
    if block is not None:
        return None, ProfileTrial(profile=profile.name, note=block), block
    fits: list[tuple[float, str, list[str]]] = []
    for nid in inv.candidate_nodes(profile):
        reason, score, picked = _try_node(ctx, inv, nid, filters, scorers)
        if reason is None:
            fits.append((-score, nid, picked))
    if len(fits) >= profile.shards:
        fits.sort()
        shards = [Shard(node=nid, gpus=picked) for _, nid, picked in fits[: profile.shards]]
        return Placement(profile, shards), ProfileTrial(profile=profile.name), ""
    short: dict[str, int] = {}
    if explain:
        fit_ids = {nid for _, nid, _ in fits}
        for nid in sorted(inv.nodes):
            if nid in fit_ids:
                continue
            reason, _, _ = _try_node(ctx, inv, nid, filters, scorers)
            if reason is None:  # not indexed (e.g. no free devices at all)
                reason = "too few free GPUs"
            short[reason] = short.get(reason, 0) + 1
    total = sum(short.values())
    parts = ", ".join(f"{n} {r}" for r, n in sorted(short.items(), key=lambda kv: (-kv[1], kv[0])))
    if profile.shards > 1:
        text = (
            f"profile {profile.name}: only {len(fits)} of {profile.shards} distinct nodes "
            f"have {_describe(profile)}"
        )
    elif profile.is_mig:
        text = f"profile {profile.name}: no free {profile.mig_profile} slice"
    else:
        text = f"profile {profile.name}: no node has {_describe(profile)}"
    if total:
        text += f" (short on {total} node{'s' if total != 1 else ''}: {parts})"
    return None, ProfileTrial(profile=profile.name, short=short), text


def place(
    model: Model,
    inv: Inventory,
    filters: list[Filter],
    scorers: list[Scorer],
    explain: bool = True,
) -> Outcome:
    """First profile (in listed order) with a feasible placement; the best scored within it."""
    out = Outcome(None)
    for profile in model.profiles:
        placement, trial, note = place_profile(model, profile, inv, filters, scorers, explain)
        if placement is not None:
            out.placement = placement
            return out
        out.trials.append(trial)
        out.notes.append(note)
    return out


def commit(model: Model, placement: Placement, inv: Inventory) -> None:
    for sh in placement.shards:
        inv.take(model, placement.profile, sh.node, sh.gpus)
    inv.charge(model.owner, profile_need(placement.profile))
