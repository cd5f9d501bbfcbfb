"""Demand from many gateways: each live instance's key (`gateways/<instance>`) added up with
the single `demand/<model>` key that other writers keep using.

A gateway's key goes when its Consul session does (the instance died or stopped). Missing is
not zero: the instance's last counts keep counting for `eviction_grace_s`, then read as zero
(an explicit zero, so no second grace starts for the model). An unreadable instance value
keeps that instance's last good counts. A restarted gateway is a new instance: for one grace
both its old and new counts count, which errs on the side of keeping replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.core.models import Demand

Counts = dict[str, Demand]  # model -> one instance's counts


def add(a: Demand, b: Demand) -> Demand:
    used = [t for t in (a.last_used, b.last_used) if t is not None]
    return Demand(
        inflight=a.inflight + b.inflight,
        queued=a.queued + b.queued,
        last_used=max(used) if used else None,
    )


def zero_after(counts: Counts) -> Counts:
    """What an instance whose grace ran out contributes: nothing, but its last use."""
    return {m: Demand(last_used=d.last_used) for m, d in counts.items()}


@dataclass
class GatewayDemand:
    """The sum over instances, with what it must remember across passes."""

    last: dict[str, Counts] = field(default_factory=dict)  # instance -> last good counts
    gone: dict[str, tuple[datetime, Counts]] = field(default_factory=dict)  # since, counts

    def merge(
        self,
        single: Mapping[str, Demand],
        instances: Mapping[str, Counts],
        unreadable: set[str],
        now: datetime,
        grace_s: float,
    ) -> dict[str, Demand]:
        live = dict(instances)
        for instance in unreadable:
            if instance in self.last:
                live[instance] = self.last[instance]
        for instance in self.last.keys() - live.keys() - self.gone.keys():
            self.gone[instance] = (now, self.last[instance])
        for instance in self.gone.keys() & live.keys():
            del self.gone[instance]  # back (a session that was only slow)
        self.last = live
        parts = list(live.values())
        for instance, (since, counts) in list(self.gone.items()):
            if (now - since).total_seconds() < grace_s:
                parts.append(counts)
            else:
                parts.append(zero_after(counts))
                del self.gone[instance]
        total = dict(single)
        for counts in parts:
            for model, demand in counts.items():
                total[model] = add(total[model], demand) if model in total else demand
        return total

    def expires(self, grace_s: float) -> list[datetime]:
        """When each vanished instance's counts stop counting."""
        from datetime import timedelta

        return [since + timedelta(seconds=grace_s) for since, _ in self.gone.values()]
