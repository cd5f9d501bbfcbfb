"""The record a GPU reporter writes to `llm-scheduler/nodes/<nomad node id>/gpus`.

Shared by the reporter (which writes it) and scheduler.adapters.gpu_reports (which reads it).
Unknown fields are ignored so a newer reporter can add data without breaking an older scheduler.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from scheduler.core.contract_base import Timestamp

RECORD_VERSION = 1

NonNeg = Annotated[int, Field(ge=0)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class MigDeviceReport(_Record):
    uuid: str  # MIG-...
    profile: str | None = None  # "3g.40gb", from the MIG device's name
    memory_total_bytes: NonNeg = 0
    memory_used_bytes: NonNeg = 0
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    placement_start: int | None = None
    placement_size: int | None = None


class XidEvent(_Record):
    xid: int
    at: Timestamp
    gpu_instance_id: int | None = None


class GpuReport(_Record):
    index: NonNeg
    uuid: str  # GPU-...
    name: str
    pci_bus_id: str | None = None  # as NVML spells it: 00000000:07:00.0
    memory_total_bytes: NonNeg = 0
    memory_used_bytes: NonNeg = 0
    # NVML gives no utilisation for a GPU in MIG mode: None there.
    utilization_gpu_pct: Annotated[int, Field(ge=0, le=100)] | None = None
    utilization_memory_pct: Annotated[int, Field(ge=0, le=100)] | None = None
    mig_enabled: bool = False
    mig_pending: bool | None = None
    mig_devices: list[MigDeviceReport] = Field(default_factory=list)
    # UUIDs of the local GPUs this one reaches over an active NVLink (directly or via NVSwitch).
    nvlink_peers: list[str] = Field(default_factory=list)
    ecc_uncorrected_volatile: NonNeg | None = None  # None: ECC counters not supported
    xid_critical_events: list[XidEvent] = Field(default_factory=list)
    xid_critical_total: NonNeg = 0
    # Every critical XID seen since the reporter started, by XID code.
    xid_critical_counts: dict[int, NonNeg] = Field(default_factory=dict)
    # NVML answered "GPU is lost" for this GPU: it needs a reset.
    lost: bool = False
    # NVML calls that failed for this GPU, e.g. "ecc: Unknown Error"; informational.
    errors: list[str] = Field(default_factory=list)


class NodeGpuReport(_Record):
    version: int = RECORD_VERSION
    node_id: str
    hostname: str | None = None
    reported_at: Timestamp
    driver_version: str | None = None
    gpus: list[GpuReport] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    # The model cache (reporter.cache_record.CacheReport), read on its own so that a bad
    # cache part leaves the GPUs' health in force.
    cache: JsonValue | None = None


_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_pci_bus_id(raw: str | bytes | None) -> str | None:
    """One spelling for a PCI bus id: NVML's `00000000:07:00.0`, Nomad's NUL-padded locality
    value and sysfs' `0000:07:00.0` all become `0000:07:00.0`. None if it is not one."""
    if raw is None:
        return None
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    text = text.replace("\x00", "").strip().lower()
    if text.startswith("pci-"):
        text = text[4:]
    match = _BUS_ID.match(text)
    if match is None:
        return None
    domain = int(match["domain"] or "0", 16)
    return f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['dev'], 16):02x}.{match['fn']}"
