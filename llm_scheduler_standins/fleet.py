"""The fleet the stand-ins pretend to run: a built-in mixed H100/A100 cluster, or a file.

Ids are stable (uuid5) so that a demo restarted tomorrow shows the same nodes and GPUs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from llm_scheduler_standins.fleet_model import GPU, MigSlice, Node

_NAMESPACE = uuid.UUID("6f1c1c2e-5b0a-4a53-9a0e-3c1f4d2b7e10")
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


class FleetError(ValueError):
    """A fleet file that cannot be used; the message is one line naming the item and field."""


def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def _gpus(
    node_name: str,
    model: str,
    count: int,
    memory_gb: float,
    mig: dict[int, list[tuple[str, int]]] | None = None,
) -> list[GPU]:
    ids = [f"GPU-{_uuid(node_name, 'gpu', str(i))}" for i in range(count)]
    gpus = []
    for i, gpu_id in enumerate(ids):
        slices = None
        if mig and i in mig:
            slices = [
                MigSlice(
                    id=f"MIG-{_uuid(node_name, 'gpu', str(i), 'mig', str(j))}",
                    profile=profile,
                    memory_gb=mem,
                )
                for j, (profile, mem) in enumerate(mig[i])
            ]
        # An HGX board's NVSwitch links every GPU with every other (MIG GPUs included: the
        # link exists, the scheduler decides whether it matters).
        peers = [other for other in ids if other != gpu_id]
        gpus.append(
            GPU(id=gpu_id, model=model, memory_gb=memory_gb, nvlink_peers=peers, mig=slices)
        )
    return gpus


def _node(name: str, gpus: list[GPU], cpu_cores: int = 96, memory_gb: int = 1024) -> Node:
    return Node(id=_uuid(name), name=name, cpu_cores=cpu_cores, memory_gb=memory_gb, gpus=gpus)


def builtin_fleet() -> list[Node]:
    """3 nodes of 8x H100 80GB, 2 of 8x A100 80GB, 1 of A100 80GB with two GPUs in MIG mode."""
    nodes = [
        _node(f"gpu-h100-{i}", _gpus(f"gpu-h100-{i}", H100, 8, 80), 192, 2048) for i in (1, 2, 3)
    ]
    nodes += [
        _node(f"gpu-a100-{i}", _gpus(f"gpu-a100-{i}", A100, 8, 80), 128, 1024) for i in (1, 2)
    ]
    mig_layout = {
        0: [("3g.40gb", 40), ("2g.20gb", 20), ("1g.10gb", 10), ("1g.10gb", 10)],
        1: [("3g.40gb", 40), ("3g.40gb", 40)],
    }
    nodes.append(
        _node("gpu-a100-mig-1", _gpus("gpu-a100-mig-1", A100, 8, 80, mig_layout), 128, 1024)
    )
    return nodes


def _location(error: Any) -> str:
    parts = [str(p) for p in error["loc"]]
    head = f"node[{parts[0]}]" if parts else "fleet"
    rest = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[1:])
    return head + rest


def parse_fleet(data: Any, source: str = "fleet") -> list[Node]:
    if isinstance(data, dict) and "nodes" in data:
        data = data["nodes"]
    if not isinstance(data, list):
        raise FleetError(f"{source}: expected a list of nodes, got {type(data).__name__}")
    try:
        nodes = TypeAdapter(list[Node]).validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise FleetError(f"{source}: {_location(first)}: {first['msg']}") from exc
    seen: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.id in seen:
            raise FleetError(f"{source}: node[{i}].id: {node.id!r} repeats node[{seen[node.id]}]")
        seen[node.id] = i
    return nodes


def load_fleet(path: str | Path) -> list[Node]:
    """Read a YAML or JSON list of nodes (or `{"nodes": [...]}`) in the snapshot's node format."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise FleetError(f"{file}: cannot read: {exc.strerror}") from exc
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise FleetError(
            f"{file}: not valid {'JSON' if file.suffix == '.json' else 'YAML'}:"
            f" {str(exc).splitlines()[0]}"
        ) from exc
    return parse_fleet(data, str(file))
