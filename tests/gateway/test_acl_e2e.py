"""The shipped gateway policy, loaded into the Consul stand-in's ACLs (default deny): the
gateway reads the catalog and statuses, writes its demand key under its session, and that
is all its token may write."""

from __future__ import annotations

import json
from pathlib import Path

import hcl2
import httpx

from llm_scheduler_standins.consul import ConsulACL, ConsulStandin, TokenSpec
from scheduler.adapters.kv_layout import KVLayout
from scheduler.gateway.config import GatewayConfig
from scheduler.gateway.server import GatewayThread
from tests.service.e2e_helpers import wait_for

POLICY = Path(__file__).parents[2] / "consul/acl/llm-gateway.policy.hcl"
LAYOUT = KVLayout()


def _token() -> TokenSpec:
    rules = hcl2.loads(POLICY.read_text())
    keys = {
        name.strip('"'): body["policy"].strip('"')
        for block in rules["key_prefix"]
        for name, body in block.items()
    }
    sessions = [
        body["policy"].strip('"') for block in rules["session_prefix"] for body in block.values()
    ]
    return TokenSpec(
        accessor_id="gateway", key_prefix_rules=keys, session_write="write" in sessions
    )


def test_the_gateway_works_with_its_least_privilege_token() -> None:
    standin = ConsulStandin(acl=ConsulACL(tokens={"gw-secret": _token()}))
    server = standin.start()
    gw = None
    try:
        standin.kv_put(LAYOUT.model_key("chat"), json.dumps({"activation_timeout_s": 1}))
        config = GatewayConfig(
            consul_addr=server.url, consul_token="gw-secret", port=0, watch_wait_s=2.0,
            instance="gw-1", log_requests=False,
        )  # fmt: skip
        gw = GatewayThread(config).start()
        wait_for(lambda: gw is not None and gw.gateway.state.catalog_read, what="the catalog")
        held = httpx.post(f"{gw.url}/v1/completions", json={"model": "chat", "prompt": "a"})
        assert held.status_code == 503  # nothing starts replicas here: held, then timed out
        key = LAYOUT.gateway_demand_key("gw-1")

        def queued() -> int | None:
            raw = standin.kv_get(key)
            # The first write may come before the request: no entry for the model yet.
            entry = json.loads(raw)["models"].get("chat") if raw else None
            return entry["queued"] if entry else None

        wait_for(lambda: queued() == 0, what="the demand key, the held request gone")
        assert httpx.get(f"{gw.url}/healthz").json()["failures"] == {}
        token = {"X-Consul-Token": "gw-secret"}
        for other in (LAYOUT.demand_key("chat"), LAYOUT.model_key("x"), LAYOUT.status_key("x")):
            denied = httpx.put(f"{server.url}/v1/kv/{other}", content=b"{}", headers=token)
            assert denied.status_code == 403, other
    finally:
        if gw is not None:
            gw.stop()
        standin.close()
