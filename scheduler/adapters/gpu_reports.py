"""Folding the GPU reporters' records (NVML's view) into the nodes built from Nomad.

Nomad's fingerprint says what exists; a report adds what Nomad does not know (health from
XID events and ECC counters, NVLink peers) and every disagreement becomes a warning line.
A malformed record is a warning naming the key and field, never an exception.

    records = read_reports(consul_client)               # {nomad node id: raw KV value}
    nodes, warnings = apply_reports(nodes, records, ecc_threshold=0)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from scheduler.adapters.cache_reports import node_cache
from scheduler.adapters.kv_layout import KVLayout
from scheduler.core.models import GPU, Node
from scheduler.reporter.record import GpuReport, NodeGpuReport, normalize_pci_bus_id

GPUS_SUFFIX = "/gpus"

# XIDs that NVIDIA's catalog attributes to the application rather than the GPU (13 graphics
# engine exception, 31 GPU memory page fault, 43 GPU stopped processing: a faulting CUDA
# program), https://docs.nvidia.com/deploy/xid-errors/. A buggy model must not take GPUs out
# of service, so these do not mark a GPU unhealthy unless the caller asks for it.
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43})


def records_from_kv(
    entries: list[dict[str, Any]] | None, layout: KVLayout = KVLayout()
) -> dict[str, bytes]:
    """`{node id: value}` from a recursive KV read of `layout.nodes` (py-consul's list of dicts)."""
    out: dict[str, bytes] = {}
    for entry in entries or []:
        key = str(entry.get("Key", ""))
        if not key.startswith(layout.nodes) or not key.endswith(GPUS_SUFFIX):
            continue
        node_id = key[len(layout.nodes) : -len(GPUS_SUFFIX)]
        value = entry.get("Value")
        if node_id and "/" not in node_id:
            out[node_id] = value if isinstance(value, bytes) else str(value or "").encode()
    return out


def read_reports(consul_client: Any, layout: KVLayout = KVLayout()) -> dict[str, bytes]:
    """Every node's record, one KV read."""
    _, entries = consul_client.kv.get(layout.nodes, recurse=True)
    return records_from_kv(entries, layout)


def parse_record(key: str, raw: bytes | str | None) -> NodeGpuReport | str:
    """The record, or one warning line naming the key and the first bad field."""
    if raw is None or raw in (b"", ""):
        return f"GPU report {key} is empty; ignored"
    try:
        return NodeGpuReport.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the whole value)"
        if first["type"] == "json_invalid":
            return f"GPU report {key} is not JSON ({first['msg']}); ignored"
        return f"GPU report {key} is malformed: field {where}: {first['msg']}; ignored"


def _base_model(name: str) -> str:
    """Nomad names a MIG device `<board> MIG <profile>`; compare boards."""
    return name.split(" MIG ", 1)[0].strip()


def _unhealthy_reasons(
    gpu: GpuReport, ecc_threshold: int, ignore_xids: frozenset[int]
) -> list[str]:
    reasons: list[str] = []
    counts = dict(gpu.xid_critical_counts)
    if not counts:  # a writer without per-XID counts: what it lists, the rest as unknown (-1)
        for event in gpu.xid_critical_events:
            counts[event.xid] = counts.get(event.xid, 0) + 1
        unlisted = gpu.xid_critical_total - len(gpu.xid_critical_events)
        if unlisted > 0:
            counts[-1] = unlisted
    count = sum(n for xid, n in counts.items() if xid not in ignore_xids)
    if count:
        xids = sorted(x for x in counts if x not in ignore_xids and x >= 0)
        listed = f" (XID {', '.join(map(str, xids))})" if xids else ""
        reasons.append(f"{count} XID critical error(s){listed}")
    ecc = gpu.ecc_uncorrected_volatile
    if ecc is not None and ecc > ecc_threshold:
        reasons.append(f"{ecc} uncorrected ECC errors (threshold {ecc_threshold})")
    if gpu.lost:
        reasons.append("NVML reports the GPU as lost")
    return reasons


class _Matcher:
    """Finds the Nomad GPU a report GPU stands for: by UUID, then by MIG slice UUIDs, then by
    PCI bus id (a MIG parent's Nomad id may be synthetic, `pci-<bus id>`)."""

    def __init__(self, gpus: list[GPU]) -> None:
        self.by_id = {g.id: g for g in gpus}
        self.by_slice = {s.id: g for g in gpus for s in g.mig or []}
        self.by_bus: dict[str, GPU] = {}
        for g in gpus:
            bus = normalize_pci_bus_id(g.id) if g.id.lower().startswith("pci-") else None
            if bus:
                self.by_bus[bus] = g

    def find(self, report: GpuReport) -> GPU | None:
        if report.uuid in self.by_id:
            return self.by_id[report.uuid]
        for mig in report.mig_devices:
            if mig.uuid in self.by_slice:
                return self.by_slice[mig.uuid]
        bus = normalize_pci_bus_id(report.pci_bus_id)
        return self.by_bus.get(bus) if bus else None


def _apply_node(
    node: Node, report: NodeGpuReport, ecc_threshold: int, ignore_xids: frozenset[int], key: str
) -> tuple[Node, list[str]]:
    warnings: list[str] = []
    where = f"node {node.name} ({node.id})"
    if report.node_id != node.id:
        warnings.append(
            f"GPU report {key} says it is from node {report.node_id!r}; used for {where}"
        )
    matcher = _Matcher(node.gpus)
    matched: dict[str, GpuReport] = {}  # Nomad GPU id -> report
    uuid_to_nomad: dict[str, str] = {}
    for reported in report.gpus:
        nomad_gpu = matcher.find(reported)
        if nomad_gpu is None and reported.mig_enabled and not reported.mig_devices:
            warnings.append(
                f"GPU {reported.uuid} ({reported.name}) on {where} is in MIG mode with no MIG "
                "instances, so Nomad offers nothing of it: create instances "
                "(llm-scheduler mig apply) or turn MIG mode off"
            )
            continue
        if nomad_gpu is None:
            warnings.append(
                f"GPU {reported.uuid} ({reported.name}) reported by NVML on {where} "
                "is not in Nomad's fingerprint; ignored"
            )
            continue
        if nomad_gpu.id in matched:
            warnings.append(
                f"GPU report {key} names Nomad GPU {nomad_gpu.id} twice; kept the first"
            )
            continue
        matched[nomad_gpu.id] = reported
        uuid_to_nomad[reported.uuid] = nomad_gpu.id

    updated: list[GPU] = []
    for gpu in node.gpus:
        gpu_report = matched.get(gpu.id)
        if gpu_report is None:
            warnings.append(f"GPU {gpu.id} on {where} is in Nomad's fingerprint but not in {key}")
            updated.append(gpu)
            continue
        warnings.extend(_disagreements(gpu, gpu_report, where))
        changes: dict[str, Any] = {}
        peers = [uuid_to_nomad[u] for u in gpu_report.nvlink_peers if u in uuid_to_nomad]
        new_peers = [p for p in peers if p != gpu.id and p not in gpu.nvlink_peers]
        if new_peers:
            changes["nvlink_peers"] = [*gpu.nvlink_peers, *new_peers]
        reasons = _unhealthy_reasons(gpu_report, ecc_threshold, ignore_xids)
        if reasons:
            changes["healthy"] = False
            if gpu.mig is not None:
                changes["mig"] = [s.model_copy(update={"healthy": False}) for s in gpu.mig]
            warnings.append(f"GPU {gpu.id} on {where} is unhealthy: {'; '.join(reasons)}")
        updated.append(gpu.model_copy(update=changes) if changes else gpu)
    return node.model_copy(update={"gpus": updated}), warnings


def _disagreements(gpu: GPU, report: GpuReport, where: str) -> list[str]:
    out: list[str] = []
    if _base_model(gpu.model) != _base_model(report.name):
        out.append(
            f"GPU {gpu.id} on {where}: Nomad says {gpu.model!r}, NVML says {report.name!r}; "
            "using Nomad's"
        )
    nomad_mig = gpu.mig is not None
    if nomad_mig != report.mig_enabled:
        out.append(
            f"GPU {gpu.id} on {where}: Nomad offers it "
            f"{'as MIG slices' if nomad_mig else 'whole'}, "
            f"NVML says MIG mode is {'on' if report.mig_enabled else 'off'}; using Nomad's"
        )
    if nomad_mig and report.mig_enabled:
        reported = {m.uuid: m for m in report.mig_devices}
        nomad_slices = {s.id: s for s in gpu.mig or []}
        for slice_id in sorted(nomad_slices.keys() - reported.keys()):
            out.append(f"MIG slice {slice_id} of GPU {gpu.id} on {where} is not in the GPU report")
        for slice_id in sorted(reported.keys() - nomad_slices.keys()):
            out.append(
                f"MIG device {slice_id} ({reported[slice_id].profile}) of GPU {gpu.id} on {where} "
                "is not in Nomad's fingerprint; ignored"
            )
        for slice_id in sorted(nomad_slices.keys() & reported.keys()):
            profile = reported[slice_id].profile
            if profile and profile != nomad_slices[slice_id].profile:
                out.append(
                    f"MIG slice {slice_id} on {where}: Nomad says "
                    f"{nomad_slices[slice_id].profile}, NVML says {profile}; using Nomad's"
                )
    return out


def apply_reports(
    nodes: list[Node],
    records: Mapping[str, bytes | str],
    *,
    ecc_threshold: int = 0,
    ignore_xids: frozenset[int] = APPLICATION_XIDS,
    layout: KVLayout = KVLayout(),
    sources: Collection[str] = (),
) -> tuple[list[Node], list[str]]:
    """Nodes with health and NVLink peers from the reports, and warning lines.

    `records` maps Nomad node id -> the raw value of `<prefix>nodes/<id>/gpus`. A GPU with
    XID critical errors (other than `ignore_xids`, by default the application-caused ones),
    uncorrected volatile ECC errors above `ecc_threshold`, or that NVML reports lost becomes
    healthy=False, and so do its MIG slices. The record's model cache becomes the node's
    cache facts (snapshots of the repositories in `sources`, the catalog's serve.source);
    a bad cache part leaves the node cold. Nodes without a record are returned as they are.
    """
    warnings: list[str] = []
    out: list[Node] = []
    known = {n.id for n in nodes}
    for node in nodes:
        if node.id not in records:
            out.append(node)
            continue
        key = layout.node_gpus_key(node.id)
        parsed = parse_record(key, records[node.id])
        if isinstance(parsed, str):
            warnings.append(parsed)
            out.append(node)
            continue
        updated, node_warnings = _apply_node(node, parsed, ecc_threshold, ignore_xids, key)
        updated, cache_warnings = node_cache(updated, parsed.cache, key, sources)
        out.append(updated)
        warnings.extend(node_warnings + cache_warnings)
    for node_id in sorted(set(records) - known):
        warnings.append(
            f"GPU report {layout.node_gpus_key(node_id)} is for a node Nomad does not list; ignored"
        )
    return out, warnings
