"""Looking a snapshot's things up for the plan checks: an index of its models, nodes,
devices and replicas, and which replicas a pass replaces make-before-break."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from scheduler.core.models import GPU, MigSlice, Model, Node, Replica, Snapshot


@dataclass
class Index:
    snap: Snapshot
    models: dict[str, Model]
    nodes: dict[str, Node]
    gpus: dict[str, tuple[Node, GPU]]
    slices: dict[str, tuple[Node, GPU, MigSlice]]
    replicas: dict[str, Replica]

    @classmethod
    def of(cls, snap: Snapshot) -> Index:
        gpus = {g.id: (n, g) for n in snap.nodes for g in n.gpus}
        slices = {s.id: (n, g, s) for n in snap.nodes for g in n.gpus for s in g.mig or []}
        return cls(
            snap,
            {m.name: m for m in snap.models},
            {n.id: n for n in snap.nodes},
            gpus,
            slices,
            {r.id: r for r in snap.replicas},
        )

    def live(self, model: str) -> list[Replica]:
        return [r for r in self.snap.replicas if r.model == model and r.counts]

    def sick(self, model: str) -> list[Replica]:
        """Live replicas holding a device marked unhealthy: replaced, no longer counted (but
        one starting past its load grace, which is stopped as timed out)."""
        m = self.models.get(model)
        grace = timedelta(seconds=(m.load_grace_s if m else 0) + 1)
        return [
            r
            for r in self.live(model)
            if any(not self.healthy(d) for sh in r.shards for d in sh.gpus)
            and not (r.state == "starting" and self.snap.now >= r.created_at + grace)
        ]

    def healthy(self, dev: str) -> bool:
        """A whole GPU or a MIG slice (and its GPU) not marked unhealthy; unknown ids are."""
        if dev in self.slices:
            _, gpu, sl = self.slices[dev]
            return gpu.healthy and sl.healthy
        return dev not in self.gpus or self.gpus[dev][1].healthy


def being_replaced(snap: Snapshot, idx: Index, m: Model, desired: int) -> set[str]:
    """A model's live replicas the pass replaces make-before-break (lifecycle.renew): the old
    side of each move under way whose replacement still counts, else, with more live than
    desired, running replicas on a worse profile than the best one live, the worst first
    (placement "preferred": the generated catalogs have no "cheapest"). They are not live
    for scaling: not scaled down, and the model grows their replacements (they stop,
    "consolidation: ...", once the others cover for them). Besides, every replica holding a
    device marked unhealthy (retirement.retire: replaced as a drain is); drained replicas are
    the caller's (they are replaced, but not by a move)."""
    sick = {r.id for r in idx.sick(m.name) if m.profile(r.profile) is not None}
    draining = {n.id for n in snap.nodes if n.draining}
    # Those on unhealthy devices or draining nodes are set apart first (retire marks them
    # before renewing), so they neither count nor are kept as the better placement.
    counting = [
        r
        for r in idx.live(m.name)
        if m.profile(r.profile) is not None
        and r.id not in sick
        and not any(sh.node in draining for sh in r.shards)
    ]
    ids = {r.id for r in counting}
    moving = {r.id for r in counting if snap.moves.get(r.id) in ids}
    if moving:
        return moving | sick
    # A roll-out under way (or one that stalled) replaces by spec instead (lifecycle.renew).
    specs = snap.specs.get(m.name) or {}
    if snap.stalled.get(m.name) in specs.values() or any(
        r.spec and specs.get(r.profile) and r.spec != specs[r.profile] for r in counting
    ):
        return sick
    extra = len(counting) - desired
    if extra <= 0:
        return sick
    rank = {p.name: i for i, p in enumerate(m.profiles)}
    ranked = sorted(counting, key=lambda r: (rank[r.profile], r.created_at, r.id))
    best = rank[ranked[0].profile]
    worse = [r for r in reversed(ranked) if r.state == "running" and rank[r.profile] > best]
    return {r.id for r in worse[:extra]} | sick
