"""The prefetch jobs of bench/warm_starts.py, simulated: a job the plan starts downloads its
model's weights into its node's simulated cache at the bench's download rate; when it is done
the weights are kept by the same LRU rule as a replica's download (or the download fails for
want of room); a job the plan stops leaves nothing behind but the bytes it downloaded so far.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.core.prefetch import PREFETCH_CPU_CORES, PREFETCH_MEMORY_GB
from scheduler.core.prefetch_records import Prefetch, PrefetchAction

# A node's volume, as bench/warm_starts.NodeVolume.keep: (source, bytes, when, in use) -> kept.
Keep = Callable[[str, str, int, datetime, set[str]], bool]


@dataclass
class _Job:
    record: Prefetch
    size: int
    began: datetime
    done_at: datetime


@dataclass
class Prefetching:
    """The running prefetch jobs and what they downloaded (bytes, failed for want of room)."""

    weights: dict[str, int]  # by source
    download_bps: float  # bytes a second
    jobs: dict[str, _Job] = field(default_factory=dict)
    downloaded: int = 0
    failed: int = 0
    started: int = 0

    def measure(self) -> None:
        self.downloaded, self.failed, self.started = 0, 0, 0

    def records(self) -> list[Prefetch]:
        """What the snapshot lists: the jobs still downloading (a finished one is in its
        node's cache report from then on)."""
        return [job.record for job in self.jobs.values()]

    def finish(self, now: datetime, keep: Keep, in_use: dict[str, set[str]]) -> None:
        """The jobs done by `now` put their weights in their node's cache."""
        for job_id, job in sorted(self.jobs.items()):
            if job.done_at > now:
                continue
            del self.jobs[job_id]
            self.downloaded += job.size
            rec = job.record
            if not keep(rec.node, rec.source, job.size, job.done_at, in_use[rec.node]):
                self.failed += 1

    def apply(self, actions: list[PrefetchAction], now: datetime, serial: int) -> None:
        """The plan's prefetch starts and stops, at `now`."""
        for a in actions:
            if a.op == "stop":
                job = self.jobs.pop(a.id, None)
                if job is not None:  # what it downloaded so far was downloaded all the same
                    done = (now - job.began).total_seconds() * self.download_bps
                    self.downloaded += min(int(done), job.size)
                continue
            source = f"org/{a.model}"
            size = self.weights[source]
            job_id = f"prefetch-{a.model}-{a.node}-{serial}"
            rec = Prefetch(
                id=job_id,
                model=a.model,
                node=a.node,
                source=source,
                cpu_cores=PREFETCH_CPU_CORES,
                memory_gb=PREFETCH_MEMORY_GB,
            )
            took = timedelta(seconds=size / self.download_bps)
            self.jobs[job_id] = _Job(rec, size, now, now + took)
            self.started += 1
