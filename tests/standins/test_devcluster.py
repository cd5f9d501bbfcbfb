"""The devcluster: Consul and Nomad stand-ins together, and the `devcluster` command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import consul
import nomad
from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.fleet import FleetError, builtin_fleet, load_fleet

CLI = [sys.executable, "-c", "from scheduler.cli import main; main()"]
EXPORT = re.compile(
    r"^export CONSUL_HTTP_ADDR=(http://127\.0\.0\.1:\d+) NOMAD_ADDR=(http://127\.0\.0\.1:\d+)$"
)


def _job(node_id: str) -> dict:
    return {
        "Job": {
            "ID": "llm-demo-r1",
            "TaskGroups": [
                {
                    "Name": "shard-0",
                    "Constraints": [
                        {"LTarget": "${node.unique.id}", "RTarget": node_id, "Operand": "="}
                    ],
                    "Networks": [{"DynamicPorts": [{"Label": "http", "To": 8000}]}],
                    "Services": [{"Name": "llm-demo", "PortLabel": "http"}],
                    "Tasks": [
                        {
                            "Name": "vllm",
                            "Driver": "docker",
                            "Resources": {"Devices": [{"Name": "nvidia/gpu", "Count": 1}]},
                        }
                    ],
                }
            ],
        }
    }


def _passing(c: consul.Consul, name: str) -> list[dict]:
    return c.health.service(name, passing=True)[1]


def test_nomad_services_appear_in_consul() -> None:
    fleet = builtin_fleet()
    with DevCluster(fleet, load_delay_s=0.05) as cluster:
        n = nomad.Nomad(host="127.0.0.1", port=int(cluster.nomad_url.rsplit(":", 1)[1]))
        c = consul.Consul(host="127.0.0.1", port=int(cluster.consul_url.rsplit(":", 1)[1]))
        n.jobs.register_job(_job(fleet[0].id))
        deadline = time.monotonic() + 5
        while not _passing(c, "llm-demo") and time.monotonic() < deadline:
            time.sleep(0.05)
        (entry,) = _passing(c, "llm-demo")
        assert entry["Service"]["ID"].startswith("_nomad-task-")
        assert entry["Node"]["Node"] == fleet[0].name
        n.job.deregister_job("llm-demo-r1")
        assert _passing(c, "llm-demo") == []
        assert cluster.nomad.jobs()[0]["Stop"] is True


def test_devcluster_command_prints_the_line_to_paste_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps([builtin_fleet()[0].model_dump()]))
    proc = subprocess.Popen(
        [*CLI, "devcluster", "--fleet", str(fleet_file), "--load-delay", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        match = EXPORT.match(line)
        if not match:
            proc.kill()
            out, err = proc.communicate(timeout=10)
            raise AssertionError(f"{line!r} rc={proc.returncode} out={out!r} err={err[-2000:]!r}")
        consul_url, nomad_url = match.groups()
        assert len(httpx.get(f"{nomad_url}/v1/nodes").json()) == 1
        assert httpx.get(f"{consul_url}/v1/kv/nothing").status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert code == 0


def test_a_fleet_files_reserved_block_is_kept_from_placements_as_nomad_does(
    tmp_path: Path,
) -> None:
    """Nomad shows a client's `reserved` block as the node's ReservedResources and its
    scheduler offers only the rest (memory, CPU, and host ports)."""
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "- id: n1\n  name: gpu-1\n  cpu_cores: 8\n  memory_gb: 16\n"
        "  reserved: {cpu: 2000, memory: 4096, reserved_ports: '22,8000-8001'}\n"
        "  gpus: [{id: GPU-1, model: NVIDIA L40S, memory_gb: 48}]\n"
    )
    (node,) = load_fleet(path)
    with DevCluster([node], load_delay_s=0.05) as cluster:
        body = httpx.get(f"{cluster.nomad_url}/v1/node/n1").json()
        assert body["ReservedResources"] == {
            "Cpu": {"CpuShares": 2000},
            "Disk": {"DiskMB": 0},
            "Memory": {"MemoryMB": 4096},
            "Networks": {"ReservedHostPorts": "22,8000-8001"},
        }

        def register(job_id: str, memory_mb: int, port: int | None) -> dict:
            job = _job("n1")["Job"]
            job["ID"] = job_id
            group = job["TaskGroups"][0]
            group["Tasks"][0]["Resources"]["MemoryMB"] = memory_mb
            if port is not None:
                group["Networks"] = [{"ReservedPorts": [{"Label": "http", "Value": port}]}]
            answer = httpx.put(f"{cluster.nomad_url}/v1/jobs", json={"Job": job})
            assert answer.status_code == 200, answer.text
            evaluation = answer.json()["EvalID"]
            return httpx.get(f"{cluster.nomad_url}/v1/evaluation/{evaluation}").json()

        taken = register("on-a-reserved-port", 64, 8001)
        assert taken["FailedTGAllocs"]["shard-0"]["DimensionExhausted"] == {
            "network: reserved port collision": 1
        }
        # 16 GiB less 4 GiB reserved: 13 GiB does not fit, 12 GiB does.
        refused = register("too-big", 13 * 1024, None)
        assert refused["FailedTGAllocs"]["shard-0"]["DimensionExhausted"] == {"memory": 1}
        assert not register("fits", 12 * 1024, None)["FailedTGAllocs"]


def test_a_bad_reserved_block_is_named(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "- {id: a, name: a, cpu_cores: 1, memory_gb: 1, reserved: {reserved_ports: '22,x'}}\n"
    )
    with pytest.raises(FleetError) as err:
        load_fleet(path)
    assert "node[0].reserved.reserved_ports" in str(err.value) and "'x'" in str(err.value)


def test_no_help_names_a_run_option_that_does_not_exist() -> None:
    import typer.main

    from scheduler.cli import app

    group = typer.main.get_command(app)
    run_options = {o for p in group.commands["run"].params for o in p.opts}  # type: ignore[attr-defined]
    texts = [group.help or ""]
    for command in group.commands.values():  # type: ignore[attr-defined]
        texts.append(command.help or "")
        texts += [getattr(p, "help", None) or "" for p in command.params]
    named = {m for text in texts for m in re.findall(r"\brun (--[a-z][a-z-]*)", text)}
    assert named <= run_options, named - run_options


def test_devcluster_command_reports_a_bad_fleet(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text("- id: n1\n  name: a\n  cpu_cores: many\n  memory_gb: 1\n")
    result = subprocess.run(
        [*CLI, "devcluster", "--fleet", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "node[0].cpu_cores" in result.stderr


def test_builtin_fleet_is_mixed_and_stable() -> None:
    fleet = builtin_fleet()
    assert fleet == builtin_fleet()
    models = {g.model for n in fleet for g in n.gpus}
    assert models == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
    mig = [g for n in fleet for g in n.gpus if g.mig]
    assert mig and {s.profile for g in mig for s in g.mig or []} >= {"3g.40gb", "1g.10gb"}
    assert all(len(n.id) == 36 for n in fleet)
    assert all(g.nvlink_peers for n in fleet for g in n.gpus)


def test_load_fleet_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "f.yaml"
    yaml_file.write_text(
        "nodes:\n- id: 7d0d6b8c-2b36-4f0e-9a4e-1c9d8e9f0a11\n  name: g1\n  cpu_cores: 32\n"
        "  memory_gb: 256\n  gpus:\n  - {id: GPU-1, model: NVIDIA L40S, memory_gb: 48}\n"
    )
    (node,) = load_fleet(yaml_file)
    assert node.gpus[0].model == "NVIDIA L40S"
    json_file = tmp_path / "f.json"
    json_file.write_text(json.dumps([node.model_dump()]))
    assert load_fleet(json_file) == [node]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[{name: a, cpu_cores: 1, memory_gb: 1}]", "node[0].id: Field required"),
        (
            "- {id: a, name: a, cpu_cores: 1, memory_gb: 1, gpus: [{id: G, model: m}]}",
            "node[0].gpus[0].memory_gb",
        ),
        (
            "- {id: a, name: a, cpu_cores: 1, memory_gb: 1}\n- {id: a, name: b, cpu_cores: 1,"
            " memory_gb: 1}",
            "node[1].id",
        ),
        (
            "- {id: a, name: a, cpu_cores: 1, memory_gb: 1, gpus: [{id: G, model: m, memory_gb: 8,"
            " mig: [{id: G, profile: 1g.10gb, memory_gb: 8}]}]}",
            "node[0]: Value error, device ids repeat on node 'a': G",
        ),
        ("{a: [", "not valid YAML"),
        ("42", "expected a list of nodes"),
    ],
)
def test_load_fleet_errors_are_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(FleetError) as err:
        load_fleet(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_snapshots_nodes_load_as_a_fleet(tmp_path: Path) -> None:
    """The stand-ins keep their own fleet model, in the snapshot's node format: what the
    scheduler derives (`held`, `draining`, `address`) is ignored, the machine itself kept."""
    from scheduler.core.models import Node as SnapshotNode

    seen = SnapshotNode.model_validate(
        {"id": "n1", "name": "a", "address": "10.1.2.3", "pool": "gpu", "datacenter": "dc2",
         "cpu_cores": 64, "memory_gb": 512, "held": ["G1"], "draining": True,
         "host_volumes": ["llm-model-cache"],
         "meta": {"rack": "r1"},
         "gpus": [{"id": "G0", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80,
                   "nvlink_peers": ["G1"]},
                  {"id": "G1", "model": "NVIDIA A100-SXM4-80GB", "memory_gb": 80,
                   "mig": [{"id": "MIG-1", "profile": "3g.40gb", "memory_gb": 40}]}]}
    )  # fmt: skip
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": [seen.model_dump(mode="json")]}))
    (node,) = load_fleet(path)
    assert type(node).__module__ == "llm_scheduler_standins.fleet_model"
    # The reported cache is the scheduler's; the stand-in cache the fleet's own.
    kept = node.model_dump(exclude={"model_cache", "reserved"})
    assert kept == seen.model_dump(exclude={"held", "draining", "address", "cache"})
