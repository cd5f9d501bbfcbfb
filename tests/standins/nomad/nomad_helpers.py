"""Helpers shared by the Nomad stand-in tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nomad
from llm_scheduler_standins.nomad import NomadStandin
from llm_scheduler_standins.registry import CheckStatus, ServiceInstance
from scheduler.core.models import GPU, Node

# shared/ lies beside the checkout (CI lays a copy there); /work/shared is the workplace mount.
FIXTURES = next(
    (
        p
        for p in (
            Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "nomad",
            Path("/work/shared/fixtures/nomad"),
        )
        if p.exists()
    ),
    Path("/work/shared/fixtures/nomad"),
)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class RecordingRegistry:
    """A ServiceRegistry that keeps what Nomad registered (stands where Consul would be)."""

    def __init__(self) -> None:
        self.services: dict[str, ServiceInstance] = {}
        self._lock = threading.Lock()

    def register_service(self, instance: ServiceInstance) -> None:
        with self._lock:
            self.services[instance.id] = instance

    def set_check_status(self, service_id: str, status: CheckStatus) -> None:
        with self._lock:
            old = self.services[service_id]
            self.services[service_id] = ServiceInstance(**{**old.__dict__, "check_status": status})

    def deregister_service(self, service_id: str) -> None:
        with self._lock:
            self.services.pop(service_id, None)


def by_name(fleet: list[Node], name: str) -> Node:
    return next(n for n in fleet if n.name == name)


def gpu_job(
    job_id: str,
    *,
    node_id: str | None = None,
    count: int = 1,
    device: str = "nvidia/gpu",
    device_constraints: list[dict[str, str]] | None = None,
    cpu: int = 1000,
    memory_mb: int = 4096,
    service: str | None = None,
    group_count: int = 1,
) -> dict[str, Any]:
    constraints = (
        [{"LTarget": "${node.unique.id}", "RTarget": node_id, "Operand": "="}] if node_id else None
    )
    group: dict[str, Any] = {
        "Name": "shard-0",
        "Count": group_count,
        "Constraints": constraints,
        "Tasks": [
            {
                "Name": "vllm",
                "Driver": "docker",
                "Config": {"image": "vllm/vllm-openai"},
                "Resources": {
                    "CPU": cpu,
                    "MemoryMB": memory_mb,
                    "Devices": [
                        {"Name": device, "Count": count, "Constraints": device_constraints}
                    ],
                },
            }
        ],
    }
    if service:
        group["Networks"] = [{"Mode": "host", "DynamicPorts": [{"Label": "http", "To": 8000}]}]
        group["Services"] = [{"Name": service, "PortLabel": "http", "Tags": ["llm"]}]
    return {"Job": {"ID": job_id, "Meta": {"model": job_id}, "TaskGroups": [group]}}


def devices_of(client: nomad.Nomad, alloc_id: str) -> list[str]:
    alloc = client.allocation.get_allocation(alloc_id)
    found: list[str] = []
    for task in alloc["AllocatedResources"]["Tasks"].values():
        for device in task["Devices"] or []:
            found += device["DeviceIDs"]
    return found


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def run_allocs(client: nomad.Nomad, job_id: str, namespace: str | None = None) -> list[dict]:
    allocs = client.job.get_allocations(job_id, namespace=namespace)
    return [a for a in allocs if a["DesiredStatus"] == "run"]


def strict_node(node_id: str, name: str, pool: str = "default", gpus: int = 2) -> Node:
    return Node(
        id=node_id,
        name=name,
        pool=pool,
        cpu_cores=16,
        memory_gb=64,
        gpus=[
            GPU(id=f"GPU-{name}-{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80)
            for i in range(gpus)
        ],
    )


@contextmanager
def nomad_standin(
    fleet: list[Node], **kwargs: object
) -> Iterator[tuple[NomadStandin, nomad.Nomad]]:
    standin = NomadStandin(fleet, load_delay_s=0.02, seed=3, **kwargs)  # type: ignore[arg-type]
    server = standin.start()
    try:
        yield standin, nomad.Nomad(host="127.0.0.1", port=server.port, timeout=10)
    finally:
        standin.stop()
