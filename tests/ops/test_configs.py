"""The shipped Nomad and Consul configs: parseable, least privilege, matching the KV layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hcl2
import httpx

from scheduler.adapters.kv_layout import KVLayout

REPO = Path(__file__).resolve().parents[2]


def _unquote(value: Any) -> Any:
    """python-hcl2 8 keeps the quotes of string literals and block labels; drop them."""
    if isinstance(value, str):
        return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items()}
    return value


def _hcl(path: str) -> dict[str, Any]:
    with (REPO / path).open() as f:
        return _unquote(hcl2.load(f))


def _consul_rules(path: str) -> dict[tuple[str, str], str]:
    """(rule kind, name) -> policy, for key/key_prefix/session_prefix/... blocks."""
    rules: dict[tuple[str, str], str] = {}
    for kind, blocks in _hcl(path).items():
        if kind.startswith("__"):
            continue
        for block in blocks:
            for name, body in block.items():
                rules[(kind, name.strip('"'))] = body["policy"]
    return rules


def _policy_for(rules: dict[tuple[str, str], str], key: str) -> str | None:
    """Consul's rule: an exact `key` wins, else the longest matching `key_prefix`."""
    if ("key", key) in rules:
        return rules[("key", key)]
    prefixes = [n for (k, n) in rules if k == "key_prefix" and key.startswith(n)]
    return rules[("key_prefix", max(prefixes, key=len))] if prefixes else None


def test_consul_policy_reads_inputs_and_writes_only_its_own_keys() -> None:
    rules = _consul_rules("consul/acl/llm-scheduler.policy.hcl")
    kv = KVLayout()
    for key in (kv.model_key("m"), kv.quota_key("org/a"), kv.demand_key("m"), kv.settings,
                kv.node_gpus_key("n1"), kv.gateway_demand_key("g1")):  # fmt: skip
        assert _policy_for(rules, key) == "read", key
    for key in (kv.status_key("m"), kv.status_errors, kv.leader, kv.holds):
        assert _policy_for(rules, key) == "write", key
    writes = {name for (kind, name), pol in rules.items() if pol == "write"}
    assert writes == {kv.status, kv.leader, kv.prefix + "state/", ""}  # "" = session_prefix
    assert rules[("session_prefix", "")] == "write"
    assert _policy_for(rules, "other-app/secret") is None
    assert not any(kind in {"acl", "operator", "agent_prefix"} for kind, _ in rules)


def test_operator_and_gateway_policies() -> None:
    gateway = _consul_rules("consul/acl/gateway.policy.hcl")
    assert gateway == {("key_prefix", "llm-scheduler/demand/"): "write"}
    ours = _consul_rules("consul/acl/llm-gateway.policy.hcl")
    kv = KVLayout()
    for key in (kv.model_key("m"), kv.status_key("m")):
        assert _policy_for(ours, key) == "read", key
    assert _policy_for(ours, kv.gateway_demand_key("g1")) == "write"
    writes = {name for (kind, name), pol in ours.items() if pol == "write"}
    assert writes == {kv.gateways, ""}  # "" = session_prefix
    assert _policy_for(ours, kv.demand_key("m")) is None
    assert _policy_for(ours, kv.quota_key("org/a")) is None
    assert ours[("service_prefix", "llm-")] == "read"
    operator = _consul_rules("consul/acl/operator.policy.hcl")
    assert _policy_for(operator, "llm-scheduler/models/x") == "write"
    assert _policy_for(operator, "llm-scheduler/status/x") == "read"
    assert _policy_for(operator, "llm-scheduler/leader") == "read"


def test_nomad_policy_is_its_namespace_and_node_read_only() -> None:
    """Jobs in its own namespace; read-job elsewhere only, to count other allocations."""
    policy = _hcl("nomad/acl/llm-scheduler.policy.hcl")
    assert set(policy) - {"__comments__"} == {"namespace", "node"}
    namespaces = {
        name.strip('"'): body for block in policy["namespace"] for name, body in block.items()
    }
    assert list(namespaces) == ["llm", "*"]
    assert namespaces["*"]["capabilities"] == ["read-job"]
    caps = set(namespaces["llm"]["capabilities"])
    assert {"submit-job", "read-job", "list-jobs"} <= caps
    assert caps <= {"submit-job", "read-job", "list-jobs", "parse-job"}
    assert policy["node"][0]["policy"] == "read"


def test_gpu_client_config_has_the_nvidia_plugin() -> None:
    config = _hcl("nomad/client-gpu.hcl")
    plugins = {name.strip('"'): body for block in config["plugin"] for name, body in block.items()}
    nvidia = plugins["nomad-device-nvidia"]["config"][0]
    assert nvidia["enabled"] is True and nvidia["fingerprint_period"] == "1m"
    assert config["client"][0]["enabled"] is True
    assert "MIG" in (REPO / "nomad/client-gpu.hcl").read_text()


def test_scheduler_jobspec_parses_through_nomad(cluster: object) -> None:
    hcl = (REPO / "jobspecs/llm-scheduler.nomad.hcl").read_text()
    r = httpx.post(
        cluster.nomad_url + "/v1/jobs/parse",  # type: ignore[attr-defined]
        json={"JobHCL": hcl, "Canonicalize": True, "Variables": 'namespace = "llm"'},
    )
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["ID"] == "llm-scheduler" and job["Namespace"] == "llm"
    group = job["TaskGroups"][0]
    assert group["Count"] == 2
    task = group["Tasks"][0]
    # In its container, 127.0.0.1 must be the node's Consul and Nomad agents: host network.
    assert task["Config"]["network_mode"] == "host"
    assert group["Networks"][0]["Mode"] == "host"
    assert task["Env"]["CONSUL_HTTP_ADDR"] == "http://127.0.0.1:8500"
    assert task["Env"]["LLM_SCHEDULER_LISTEN_ADDR"] == "0.0.0.0:${NOMAD_PORT_ops}"
    assert group["Networks"][0]["DynamicPorts"][0]["Label"] == "ops"
    assert group["Services"][0]["Checks"][0]["Path"] == "/healthz"
    # Starts without the tokens variable (no ACLs): nomadVar is guarded by nomadVarExists.
    tmpl = task["Templates"][0]["EmbeddedTmpl"]
    assert 'nomadVarExists "nomad/jobs/llm-scheduler"' in tmpl
    assert tmpl.index("nomadVarExists") < tmpl.index("nomadVar ")


def test_reporter_policy_lets_the_reporter_publish_and_nothing_more() -> None:
    """The shipped policy, loaded into the Consul stand-in's ACLs, with the real writer."""
    import pytest

    import consul as consul_lib
    from llm_scheduler_standins.consul import ConsulACL, ConsulStandin, TokenSpec
    from scheduler.reporter.fake_gpus import a100_mig_fleet
    from scheduler.reporter.fake_nvml import FakeNvml
    from scheduler.reporter.probe import NvmlProbe
    from scheduler.reporter.writer import ReportWriter

    rules = _consul_rules("consul/acl/gpu-reporter.policy.hcl")
    assert set(rules) == {("key_prefix", "llm-scheduler/nodes/"), ("session_prefix", "")}
    token = TokenSpec(
        accessor_id="reporter",
        key_prefix_rules={n: p for (k, n), p in rules.items() if k == "key_prefix"},  # type: ignore[misc]
        session_write=rules[("session_prefix", "")] == "write",
    )
    standin = ConsulStandin(acl=ConsulACL(tokens={"reporter-secret": token}))
    server = standin.start()
    try:
        client = consul_lib.Consul(  # type: ignore[attr-defined]
            host=server.host, port=server.port, token="reporter-secret"
        )
        key = KVLayout().node_gpus_key("node-1")
        writer = ReportWriter(client, key, ttl_s=10, session_name="gpu-reporter node-1")
        assert writer.publish(NvmlProbe("node-1", nvml=FakeNvml(a100_mig_fleet())).read())
        assert standin.kv_get(key) is not None
        for other in ("llm-scheduler/models/x", "llm-scheduler/status/x", "llm-scheduler/leader"):
            with pytest.raises(consul_lib.ACLPermissionDenied):
                client.kv.put(other, "{}")
        writer.close()
    finally:
        standin.close()


def test_gateway_jobspec_parses_through_nomad(cluster: object) -> None:
    hcl = (REPO / "jobspecs/gateway.nomad.hcl").read_text()
    r = httpx.post(
        cluster.nomad_url + "/v1/jobs/parse",  # type: ignore[attr-defined]
        json={"JobHCL": hcl, "Canonicalize": True, "Variables": 'namespace = "llm"'},
    )
    assert r.status_code == 200, r.text
    group = r.json()["TaskGroups"][0]
    assert group["Count"] >= 2
    [service] = group["Services"]
    assert service["PortLabel"] == "http" and service["Provider"] == "consul"
    assert service["Checks"][0]["Path"] == "/healthz"
    task = group["Tasks"][0]
    assert task["Config"]["args"][:2] == ["gateway", "--json"]
    assert task["KillSignal"] == "SIGTERM"
