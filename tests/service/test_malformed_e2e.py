"""Hundreds of malformed values at every prefix of the KV layout, through the
real service on the stand-ins; every bad key is reported and frozen, a canary still scales."""

from __future__ import annotations

import json

import malformed
from e2e_helpers import LAYOUT, model_value, our_jobs, put, service_config, status, wait_for

from llm_scheduler_standins.devcluster import DevCluster
from scheduler.service.loop import Service


def _all_values() -> dict[str, bytes]:
    """key -> value; at least 150 malformed values over models, quotas, demand, settings,
    nodes, status, state and leader."""
    generic = malformed.generic_values()
    out: dict[str, bytes] = {}
    for i, (_, raw) in enumerate(generic + malformed.model_values()):
        out[LAYOUT.model_key(f"bad-m{i}")] = raw
    for i, (_, raw) in enumerate(generic + malformed.demand_values()):
        out[LAYOUT.demand_key(f"bad-d{i}")] = raw
    for name in malformed.demand_key_names():
        out[LAYOUT.demand_key(name)] = b'{"inflight": 1}'
    out[LAYOUT.demand_key("ghost")] = b'{"inflight": 1}'  # no such model
    for i, (_, raw) in enumerate(generic + malformed.quota_values()):
        out[LAYOUT.quota_key(f"org/bad{i}")] = raw
    for i, (_, raw) in enumerate(generic + malformed.gpu_report_values()):
        out[LAYOUT.node_gpus_key(f"node-bad{i}")] = raw
    for i, (_, raw) in enumerate(generic):
        out[LAYOUT.status_key(f"bad-s{i}")] = raw
    return out


def test_malformed_values_everywhere_are_reported_and_a_canary_still_scales(
    cluster: DevCluster,
) -> None:
    put(cluster, LAYOUT.model_key("canary"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("canary"), {"inflight": 5})
    put(cluster, LAYOUT.model_key("keeper"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("keeper"), {"inflight": 5})
    # Idle on demand: its grace is counted from last_used, which goes to the end of time.
    on_demand = {"min": 0, "max": 1, "target_per_replica": 10, "on_demand": True}
    put(cluster, LAYOUT.model_key("idle"), model_value([{"name": "p"}], scaling=on_demand))
    svc = Service(service_config(cluster))
    svc.run_in_thread()
    try:
        wait_for(lambda: our_jobs(cluster, "canary"), what="the canary's first job")
        wait_for(lambda: our_jobs(cluster, "keeper"), what="the keeper's job")
        values = _all_values()
        singles = (
            [(LAYOUT.settings, raw) for _, raw in malformed.settings_values()]
            + [(LAYOUT.holds, raw) for _, raw in malformed.state_values()]
            + [(LAYOUT.leader, raw) for _, raw in malformed.generic_values()[:3]]
            # The keeper's demand goes bad: it is frozen with its replica, not scaled to 0.
            + [(LAYOUT.demand_key("keeper"), b'{"inflight": 1e999}')]
            + [(LAYOUT.demand_key("idle"), b'{"last_used": "9999-12-31T23:59:00Z"}')]
        )
        assert len(values) + len(singles) >= 150
        for key, raw in [*values.items(), *singles]:
            cluster.consul.kv_put(key, raw)
        passes = svc.passes
        put(cluster, LAYOUT.demand_key("canary"), {"inflight": 15})
        wait_for(lambda: len(our_jobs(cluster, "canary")) == 2, what="the canary scales up")
        wait_for(lambda: svc.passes > passes + 2, what="more passes")
        assert svc.pass_failures == 0
        assert our_jobs(cluster, "keeper"), "a frozen model lost its replica"
        # Every bad model key is named, with the reason, in that model's status.
        for i in range(len(malformed.generic_values() + malformed.model_values())):
            st = wait_for(lambda i=i: status(cluster, f"bad-m{i}"), what=f"status of bad-m{i}")
            assert st["last_error"].startswith(LAYOUT.model_key(f"bad-m{i}") + ": ")
        general = wait_for(lambda: (status(cluster, "_errors") or {}).get("errors"), what="errors")
        text = "\n".join(general)
        for i in range(len(malformed.generic_values() + malformed.quota_values())):
            assert LAYOUT.quota_key(f"org/bad{i}") + ":" in text
        assert LAYOUT.settings + ": max_victims" in text  # the last settings value written
        # A demand key that names no model, or no model of the catalog: one line each.
        for name in malformed.demand_key_names():
            shown = name.replace("\n", "\\n").replace("\x00", "\\x00")[:100]
            assert f"{LAYOUT.demand}{shown}" in text, name
        assert text.count(f"{LAYOUT.demand_key('ghost')}: no model 'ghost'") == 1
        assert all("\n" not in line for line in general)
        # A timestamp out of range is named by key and field; the pass went on over it.
        idle = wait_for(lambda: (status(cluster, "idle") or {}).get("last_error"), what="idle")
        assert idle.startswith(LAYOUT.demand_key("idle") + ": last_used: "), idle
        # The bounds named the field, not only the key.
        st = status(cluster, f"bad-m{len(malformed.generic_values())}")
        assert st is not None and "scaling.target_per_replica" in st["last_error"]
        # The scheduler's own keys were repaired or left alone, never fatal.
        holds = json.loads(cluster.consul.kv_get(LAYOUT.holds) or b"{}")
        assert isinstance(holds, dict)
    finally:
        svc.stop()
