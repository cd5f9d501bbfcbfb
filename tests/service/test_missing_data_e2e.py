"""A deleted model retires after a grace; missing demand is not zero;
a listing Consul filtered by ACLs (or a failed read) is unknown and stops nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    our_jobs,
    put,
    small_fleet,
    start_leader,
    status,
    wait_for,
)
from typer.testing import CliRunner

from llm_scheduler_standins.consul.acl import ConsulACL, TokenSpec
from llm_scheduler_standins.devcluster import DevCluster
from scheduler.cli import app
from scheduler.service.loop import Service


def _state(dc: DevCluster) -> dict:
    return json.loads(dc.consul.kv_get(LAYOUT.holds) or b"{}")


@pytest.fixture
def service(cluster: DevCluster) -> Iterator[Service]:
    svc = start_leader(cluster)
    try:
        yield svc
    finally:
        svc.stop()


def test_models_delete_retires_after_the_grace_remembered_across_a_restart(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(cluster, LAYOUT.settings, {**FAST_SETTINGS, "retire_grace_s": 3})
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 5})
    svc = start_leader(cluster)
    try:
        wait_for(lambda: our_jobs(cluster, "llama"), what="a llama job")
        monkeypatch.setenv("CONSUL_HTTP_ADDR", cluster.consul_url)
        monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
        dry = CliRunner().invoke(app, ["models", "delete", "llama", "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        # The service's log lines (other threads) may land in the captured output too.
        text = dry.output if dry.output.startswith("{") else dry.output[dry.output.index("\n{") :]
        answer, _ = json.JSONDecoder().raw_decode(text.strip())
        assert answer["changes"][0]["action"] == "delete"
        assert cluster.consul.kv_get(LAYOUT.model_key("llama")) is not None
        done = CliRunner().invoke(app, ["models", "delete", "llama"])
        assert done.exit_code == 0, done.output
        assert cluster.consul.kv_get(LAYOUT.model_key("llama")) is None
        deleted = time.monotonic()
        since = wait_for(
            lambda: _state(cluster).get("gone", {}).get("models", {}).get("llama"),
            what="the disappearance recorded in the state key",
        )
        st = wait_for(
            lambda: (
                (s := status(cluster, "llama"))
                and (s.get("pending") or "").startswith("retiring")
                and s
            ),
            what="a retiring status",
        )
        assert st["desired"] == 0 and st["live"] == 1
    finally:
        svc.stop()  # a planned restart inside the grace
    svc = start_leader(cluster)
    try:
        assert our_jobs(cluster, "llama"), "stopped before the grace"
        wait_for(lambda: not our_jobs(cluster, "llama"), timeout=15, what="the retirement")
        assert time.monotonic() - deleted >= 2.5  # the grace counted from the deletion...
        assert svc.builder.memory.gone.models.get("llama", datetime.fromisoformat(since)) == (
            datetime.fromisoformat(since)  # ...as remembered in KV, not from the restart
        )
        wait_for(lambda: status(cluster, "llama") is None, what="the status record removed")
        # Item 7: per-job and per-model memory forgets what is gone (purged job, retired model).
        wait_for(
            lambda: not any(j.startswith("llm-llama-") for j in svc.builder.reader.job_cache),
            what="the job cache forgets the purged job",
        )
        assert "llama" not in svc.builder._last_health and "llama" not in svc.actuator.errors
        wait_for(lambda: "llama" not in _state(cluster)["gone"]["models"], what="state cleaned")
        missing = CliRunner().invoke(app, ["models", "delete", "llama"])
        assert missing.exit_code != 0 and "no such model" in missing.output
    finally:
        svc.stop()


def test_deleted_demand_keeps_the_last_demand_for_the_eviction_grace(
    cluster: DevCluster,
) -> None:
    put(cluster, LAYOUT.settings, {**FAST_SETTINGS, "eviction_grace_s": 3})
    put(cluster, LAYOUT.model_key("llama"), model_value([{"name": "p", "gpus": 1}]))
    put(cluster, LAYOUT.demand_key("llama"), {"inflight": 15})
    svc = start_leader(cluster)
    try:
        wait_for(lambda: len(our_jobs(cluster, "llama")) == 2, what="two jobs")
        cluster.consul.kv_delete(LAYOUT.demand_key("llama"))
        deleted = time.monotonic()
        time.sleep(1.5)
        assert len(our_jobs(cluster, "llama")) == 2, "missing demand was taken for zero"
        wait_for(lambda: not our_jobs(cluster, "llama"), timeout=15, what="scale-down")
        assert time.monotonic() - deleted >= 2.5
    finally:
        svc.stop()


def test_a_listing_filtered_by_acls_is_unknown_and_stops_nothing() -> None:
    rules: dict = {"llm-scheduler/": "write"}
    token = TokenSpec("11111111-2222-3333-4444-555555555555", rules, session_write=True)
    acl = ConsulACL(tokens={"svc": token}, default_policy="deny")
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, consul_acl=acl) as dc:
        put(dc, LAYOUT.settings, {**FAST_SETTINGS, "retire_grace_s": 0})
        for name in ("llama", "qwen"):
            put(dc, LAYOUT.model_key(name), model_value([{"name": "p", "gpus": 1}]))
            put(dc, LAYOUT.demand_key(name), {"inflight": 15})
        svc = start_leader(dc, consul_token="svc")
        try:
            wait_for(lambda: len(our_jobs(dc, "llama")) == 2, what="llama's jobs")
            wait_for(lambda: len(our_jobs(dc, "qwen")) == 2, what="qwen's jobs")
            # An ACL edit hides one demand key and one model key from the scheduler.
            rules["llm-scheduler/demand/llama"] = "deny"
            rules["llm-scheduler/models/qwen"] = "deny"
            wait_for(lambda: svc.last_read_error, what="the filtered listing noticed")
            assert "X-Consul-Results-Filtered-By-ACLs" in svc.last_read_error
            time.sleep(1.5)
            assert len(our_jobs(dc, "llama")) == 2, "hidden demand was taken for zero"
            assert len(our_jobs(dc, "qwen")) == 2, "a hidden model was retired"
            health = svc.health()
            assert not health["ok"] and "filtered the listing" in "".join(health["reasons"])
            del rules["llm-scheduler/demand/llama"], rules["llm-scheduler/models/qwen"]
            wait_for(lambda: svc.health()["ok"], what="healthy again")
            assert len(our_jobs(dc, "llama")) == 2 and len(our_jobs(dc, "qwen")) == 2
        finally:
            svc.stop()
