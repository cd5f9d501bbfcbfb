"""A quiet pass is carried over (no snapshot build, no decision, no status
write), and every kind of change makes the next pass a full one. Over the loopback stand-ins,
through the real clients; only our own builder and decide are wrapped, to count calls."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    service_config,
    small_fleet,
    status,
    wait_for,
)

import scheduler.service.loop as loop_module
from llm_scheduler_standins.devcluster import DevCluster
from scheduler.ops.metrics import MetricsObserver
from scheduler.service.loop import Service

# The scale-down window gives the quiet plan a calm_until (now + 300 s) for the clock to reach.
SETTINGS = {**FAST_SETTINGS, "scale_down_window_s": 300}


@dataclass
class Counts:
    builds: int = 0
    decides: int = 0


@dataclass
class Rig:
    dc: DevCluster
    svc: Service
    counts: Counts
    metrics: MetricsObserver
    offset: list[timedelta]  # the service's clock runs this far ahead

    def carried(self) -> float:
        value = self.metrics.registry.get_sample_value("llm_scheduler_passes_carried_total")
        return value or 0.0

    def quiet(self) -> None:
        """Passes are carried over: three in a row with no build and no decision between
        (waiting out what the stand-ins still do after a change: a reschedule, a GC)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            counts = (self.counts.builds, self.counts.decides)
            carried = self.svc.carry.carried
            while time.monotonic() < deadline and self.svc.carry.carried < carried + 3:
                time.sleep(0.05)
            done = self.svc.carry.carried >= carried + 3
            if done and (self.counts.builds, self.counts.decides) == counts:
                return
        raise AssertionError("passes were not carried over")

    def full_pass_after(self, change: Any) -> None:
        """`change()` makes the next pass build a snapshot and decide."""
        self.quiet()
        builds, decides = self.counts.builds, self.counts.decides
        change()
        wait_for(lambda: self.counts.builds > builds, timeout=10, what="a full pass")
        wait_for(lambda: self.counts.decides > decides, timeout=10, what="a decision")


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05) as dc:
        put(dc, LAYOUT.settings, SETTINGS)
        put(dc, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
        put(dc, LAYOUT.demand_key("llama"), {"inflight": 5})
        metrics = MetricsObserver()
        svc = Service(service_config(dc, pass_interval_s=0.2), observers=[metrics])
        counts = Counts()
        lock = threading.Lock()
        build, decide = svc.builder.build, loop_module.decide

        def counted_build(*args: Any, **kwargs: Any) -> Any:
            with lock:
                counts.builds += 1
            return build(*args, **kwargs)

        def counted_decide(*args: Any, **kwargs: Any) -> Any:
            with lock:
                counts.decides += 1
            return decide(*args, **kwargs)

        offset = [timedelta(0)]
        monkeypatch.setattr(svc.builder, "build", counted_build)
        monkeypatch.setattr(loop_module, "decide", counted_decide)
        svc.clock = lambda: datetime.now().astimezone() + offset[0]
        svc.run_in_thread()
        try:
            wait_for(lambda: svc.leader.is_leader, what="leadership")
            wait_for(
                lambda: (
                    [r["state"] for r in (status(dc, "llama") or {}).get("replicas", [])]
                    == ["running"]
                ),
                what="llama running",
            )
            yield Rig(dc, svc, counts, metrics, offset)
        finally:
            svc.stop()


def modify_index(svc: Service, key: str) -> int:
    _, entry = svc.consul.kv.get(key)
    return int(entry["ModifyIndex"])


def test_a_quiet_pass_is_carried_over_and_writes_nothing(rig: Rig) -> None:
    rig.quiet()
    key = LAYOUT.status_key("llama")
    index = modify_index(rig.svc, key)
    carried, metric = rig.svc.carry.carried, rig.carried()
    wait_for(lambda: rig.svc.carry.carried >= carried + 3, what="more carried passes")
    assert modify_index(rig.svc, key) == index  # the status record was not written again
    assert rig.carried() > metric  # llm_scheduler_passes_carried_total
    health = rig.svc.health()  # /healthz's clock sees carried passes as passes
    assert health["ok"] and health["last_pass_age_s"] < 2, health
    assert rig.svc.last_plan is not None and not rig.svc.last_plan.actions


def test_every_change_makes_the_next_pass_a_full_one(rig: Rig) -> None:
    dc, svc = rig.dc, rig.svc
    # A KV model edit (the plan stays the same: one replica).
    wider = {"min": 0, "max": 3, "target_per_replica": 10}
    edited = model_value([{"name": "p", "gpus": 1}], scaling=wider)
    rig.full_pass_after(lambda: put(dc, LAYOUT.model_key("llama"), edited))
    # A key only the whole-prefix watch sees: the scheduler's own state key, edited by hand
    # (a field the scheduler ignores). Consul answers a keys listing at the highest
    # ModifyIndex under the prefix, folded keys included (agent/consul/state/kvs.go,
    # KVSListKeys), and skips a write of the same value (kvsSetTxn: no new index).
    _, entry = svc.consul.kv.get(LAYOUT.holds)
    state = {**json.loads(entry["Value"]), "note": "edited by hand"}
    rig.full_pass_after(lambda: put(dc, LAYOUT.holds, state))
    # A node going down (one without our replica: the plan stays quiet).
    llama_nodes = {n for r in status(dc, "llama")["replicas"] for n in r["nodes"]}  # type: ignore[index]
    idle = next(n.id for n in small_fleet() if n.id not in llama_nodes)
    written = modify_index(svc, LAYOUT.status_key("llama"))
    rig.full_pass_after(lambda: dc.nomad.set_node_status(idle, "down"))
    rig.quiet()
    # That full pass found llama's record unchanged and did not write it (its sentences name
    # instants, not seconds elapsed, so a later pass says the same).
    assert modify_index(svc, LAYOUT.status_key("llama")) == written
    # A Nomad allocation change: the replica's allocation fails (Nomad places it again).
    [job] = [j for j in dc.nomad.jobs() if (j.get("Meta") or {}).get("llm_scheduler_model")]
    [alloc] = [a for a in dc.nomad.allocations(job["ID"]) if a["ClientStatus"] == "running"]
    rig.full_pass_after(lambda: dc.nomad.fail_allocation(alloc["ID"], reschedule=True))
    wait_for(
        lambda: (
            [r["state"] for r in (status(dc, "llama") or {}).get("replicas", [])] == ["running"]
        ),
        what="llama running again",
    )
    # The clock reaching calm_until (the scale-down window's end): no input changed.
    rig.quiet()
    kept = svc.carry._kept
    assert kept is not None and kept.until is not None
    ahead = kept.until - kept.view.snapshot.now + timedelta(seconds=1)
    rig.full_pass_after(lambda: rig.offset.__setitem__(0, rig.offset[0] + ahead))
    # Leadership: the session is destroyed, the lock released; the service leads again.
    session = svc.leader.session
    assert session is not None
    rig.full_pass_after(lambda: svc.consul.session.destroy(session))
    wait_for(lambda: svc.leader.is_leader, what="leading again")
    rig.quiet()
