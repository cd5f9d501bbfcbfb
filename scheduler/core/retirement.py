"""Replicas that go whatever the placement (docs/decision-core.md, rules L1, L2, S2): load-grace
time-outs, drains, deleted models, scale-downs and replicas of removed profiles; and the one
make-before-break replacement that drains, roll-outs and consolidation share.

`Retirement` is mixed into decide._Pass (after lifecycle.Lifecycle, whose abstract steps it
fills in); the state it uses is declared here.
"""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.lifecycle import Lifecycle
from scheduler.core.models import Model, ModelStatus, Replica, StopAction, rfc3339
from scheduler.core.preemption import VictimPool
from scheduler.core.scaling import Want

# Why a replaced replica stops: (when it is not serving yet, once others cover for it).
DRAIN = (
    "its node is draining and it is not serving yet",
    "its node is draining; replaced elsewhere",
)


class Retirement(Lifecycle):
    timed_out: dict[str, int]
    stale: dict[str, list[Replica]]
    wants: dict[str, Want]
    pool: VictimPool | None

    def stop(self, replica_id: str) -> None:
        raise NotImplementedError

    def retire(self) -> None:
        """Replicas that go whatever the demand. One still starting past its model's
        load_grace_s is stopped. One on a draining node no longer counts as live, so the model
        grows a replacement elsewhere (where room allows) while it still serves; it is stopped
        once it is not serving, or once enough replicas elsewhere run (make-before-break)."""
        draining = {n.id for n in self.snapshot.nodes if n.draining}
        for m in self.snapshot.models:
            self.renew(m)
            if not draining and m.name not in self.inv.facts.starting:
                continue  # the common case: nothing to look at
            # A replica of a removed profile is not counted already; replace_stale sees to it.
            counting = sorted(
                self.inv.facts.current.get(m.name, ()), key=lambda r: (r.created_at, r.id)
            )
            movers: list[Replica] = []
            for r in counting:
                if r.id in self.retired:
                    continue  # already being replaced (rolling update)
                age = int((self.now - r.created_at).total_seconds())
                if r.state == "starting" and age > m.load_grace_s:
                    # Still counted in this pass (its room is not free yet): replaced once it
                    # is stopping, not alongside it.
                    reason = (
                        f"still starting after {age}s, past its load grace of {m.load_grace_s}s"
                    )
                    self.retire_one(r, m, reason)
                    self.timed_out[m.name] = self.timed_out.get(m.name, 0) + 1
                    self.stall(m, r)
                elif draining and any(sh.node in draining for sh in r.shards):
                    movers.append(r)
                    self.retired.add(r.id)
                    self.live[m.name] -= 1
            if movers:
                self.replace(m, movers, counting, DRAIN)

    def replace(
        self, m: Model, movers: list[Replica], counting: list[Replica], why: tuple[str, str]
    ) -> None:
        """Make-before-break, for drains, rolling updates and consolidation alike: `movers`
        (already not live) are stopped at once when not serving, and otherwise only once
        enough replicas elsewhere run to cover the model's desired count."""
        serving = [r for r in movers if r.state == "running"]
        running_elsewhere = sum(
            1 for r in counting if r.state == "running" and r.id not in self.retired
        )
        spare = running_elsewhere + len(serving) - self.desired[m.name]
        for r in movers:
            if r.state != "running":
                self.retire_one(r, m, why[0])
            elif spare > 0:
                spare -= 1
                self.retire_one(r, m, why[1])

    def mark(self, m: Model, movers: list[Replica]) -> None:
        """No longer live: the model grows their replacements in this pass."""
        for r in movers:
            self.retired.add(r.id)
            self.live[m.name] -= 1

    def retire_one(self, r: Replica, m: Model, reason: str) -> None:
        self.stop(r.id)
        self.retired.add(r.id)
        self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def retire_deleted(self) -> dict[str, ModelStatus]:
        """Stop the replicas of models whose key was deleted, once the grace has passed (a key
        deleted by mistake can be put back in time); their statuses say when."""
        grace = timedelta(seconds=self.settings.retire_grace_s)
        statuses: dict[str, ModelStatus] = {}
        for name, since in sorted(self.snapshot.retired.items()):
            if name in self.desired:
                continue  # back in the catalog
            reps = sorted(
                (r for r in self.inv.facts.by_model.get(name, []) if r.counts), key=lambda r: r.id
            )
            due = since + grace
            if reps and self.now >= due:
                for r in reps:
                    self.stop(r.id)
                    reason = f"retired: its key was deleted at {rfc3339(since)}"
                    self.stops.append(StopAction(replica=r.id, model=name, reason=reason))
            pending = None
            if reps and self.now < due:
                pending = f"retiring: its key was deleted; its replicas stop at {rfc3339(due)}"
            statuses[name] = ModelStatus(desired=0, live=len(reps), pending=pending)
        return statuses

    def scale_down(self) -> None:
        """First, for every model: scale-downs do not depend on placement, and preemption must
        not pick a replica that is stopped anyway (nor count it towards a minimum)."""
        for m in self.snapshot.models:
            name = m.name
            want = self.desired[name]
            have = self.live[name] - self.timed_out.get(name, 0)
            if have <= want:
                continue
            reps = sorted(
                (r for r in self.inv.facts.current.get(name, ()) if r.id not in self.retired),
                key=lambda r: (r.created_at, r.id),
                reverse=True,
            )
            for r in reps[: have - want]:
                self.stop(r.id)
                reason = f"scale down: {have} live, {self.wants[m.name].why}"
                self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))

    def replace_stale(self) -> None:
        """Make before break: a replica of a removed profile stops once enough replicas of
        current profiles run (or the model wants none)."""
        for m in self.snapshot.models:
            old = self.stale.get(m.name)
            if not old:
                continue
            want = self.desired[m.name]
            running = sum(
                1
                for r in self.inv.facts.current.get(m.name, ())
                if r.state == "running"
                and r.id not in self.spoken_for
                and (self.pool is None or r.id not in self.pool.excluded)
            )
            if want > 0 and running < want:
                continue
            for r in old:
                self.stop(r.id)
                reason = f"replaced: profile {r.profile} is no longer in the model"
                self.stops.append(StopAction(replica=r.id, model=m.name, reason=reason))
