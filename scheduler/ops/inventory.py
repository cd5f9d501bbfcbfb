"""Who holds which device, from a snapshot: the common ground of metrics, dashboard and demo."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.models import Snapshot


@dataclass(frozen=True)
class Holder:
    model: str
    replica: str
    state: str


@dataclass(frozen=True)
class Usage:
    gpus_total: int
    gpus_allocated: int
    mig_total: int
    mig_allocated: int
    holders: dict[str, Holder]  # device id (GPU-… or MIG-…) -> who holds it

    @property
    def gpu_utilisation(self) -> float:
        """Share of whole GPUs and MIG slices taken (a GPU in MIG mode counts by its slices)."""
        total = self.gpus_total + self.mig_total
        return (self.gpus_allocated + self.mig_allocated) / total if total else 0.0


def usage(snapshot: Snapshot) -> Usage:
    holders: dict[str, Holder] = {}
    for replica in snapshot.replicas:
        for shard in replica.shards:
            for dev in shard.gpus:
                holders[dev] = Holder(replica.model, replica.id, replica.state)
    gpus_total = gpus_alloc = mig_total = mig_alloc = 0
    for node in snapshot.nodes:
        for gpu in node.gpus:
            if gpu.mig is None:
                gpus_total += 1
                gpus_alloc += gpu.id in holders
            else:
                mig_total += len(gpu.mig)
                mig_alloc += sum(s.id in holders for s in gpu.mig)
    return Usage(gpus_total, gpus_alloc, mig_total, mig_alloc, holders)
