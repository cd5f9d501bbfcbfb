"""Reading a node's GPUs: the `GpuProbe` port and its NVML implementation.

The NVML module is injected (`NvmlProbe(nvml=fake)`), defaulting to `pynvml` from the
nvidia-ml-py distribution; tests pass scheduler.reporter.fake_nvml objects, which raise the
same pynvml error classes. Every per-GPU call is guarded: one failing call becomes a line in
that GPU's `errors`, never a crash of the reporter.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from scheduler.reporter.record import (
    GpuReport,
    MigDeviceReport,
    NodeGpuReport,
    XidEvent,
    normalize_pci_bus_id,
)

NO_INSTANCE = 0xFFFFFFFF  # what NVML puts in an event's gpuInstanceId when it has none
MAX_EVENTS_PER_READ = 1000

NVML_MISSING = (
    "NVML is not available on this node ({why}): install the NVIDIA driver "
    "or run the reporter only on GPU nodes"
)


class GpuProbe(Protocol):
    """Where a reporter gets its node's GPU record from."""

    def open(self) -> None: ...

    def read(self) -> NodeGpuReport: ...

    def close(self) -> None: ...


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this node; the message is one sentence for the operator."""


def _text(value: Any) -> str:
    """nvidia-ml-py returns str on Python 3 through @convertStrBytes; older releases gave bytes."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def mig_profile_from_name(name: str) -> str | None:
    """`NVIDIA A100-SXM4-40GB MIG 3g.20gb` -> `3g.20gb` (the name NVML gives a MIG device)."""
    _, sep, profile = name.partition(" MIG ")
    return profile.strip() or None if sep else None


class NvmlProbe:
    """Reads every GPU through NVML. open() initialises NVML and registers for XID events;
    read() drains pending events without blocking, then reads each GPU."""

    def __init__(
        self,
        node_id: str,
        *,
        nvml: Any = None,
        hostname: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        keep_xid_events: int = 20,
    ) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._node_id = node_id
        self._hostname = hostname
        self._clock = clock
        self._keep = keep_xid_events
        self._events: Any = None
        self._xids: dict[str, deque[XidEvent]] = {}
        self._xid_counts: dict[str, dict[int, int]] = {}
        self._node_errors: list[str] = []
        self._opened = False

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise NvmlUnavailable(NVML_MISSING.format(why=self._why(err))) from err
        self._opened = True
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as err:
            self._node_errors.append(f"xid events: {err}")
            return
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
            except nvml.NVMLError as err:
                self._node_errors.append(f"xid events on GPU {index}: {err}")

    def close(self) -> None:
        if not self._opened:
            return
        nvml = self._nvml
        if self._events is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
        self._opened = False

    def _why(self, err: Exception) -> str:
        nvml = self._nvml
        value = getattr(err, "value", None)
        if value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return "libnvidia-ml.so.1 not found"
        if value == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return "the NVIDIA kernel driver is not loaded"
        return f"nvmlInit failed: {err}"

    # ------------------------------------------------------------ reading

    def read(self) -> NodeGpuReport:
        if not self._opened:
            self.open()
        nvml = self._nvml
        errors = list(self._node_errors)
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            errors.append(f"device count: {err}")
            count = 0
        handles: list[tuple[int, Any]] = []
        for index in range(count):
            try:
                handles.append((index, nvml.nvmlDeviceGetHandleByIndex(index)))
            except nvml.NVMLError as err:
                errors.append(f"GPU {index}: {err}")
        bus_to_uuid: dict[str, str] = {}
        for _, handle in handles:
            try:
                bus = normalize_pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
                if bus:
                    bus_to_uuid[bus] = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError:
                pass  # read_gpu below records the failure
        self._drain_events(errors)
        gpus: list[GpuReport] = []
        switch_connected: list[str] = []
        for index, handle in handles:
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError as err:
                errors.append(f"GPU {index} uuid: {err}")
                continue
            report, via_switch = self._read_gpu(index, handle, uuid, bus_to_uuid)
            gpus.append(report)
            if via_switch:
                switch_connected.append(uuid)
        gpus = _join_switch_peers(gpus, switch_connected)
        driver: str | None
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = None
        return NodeGpuReport(
            node_id=self._node_id,
            hostname=self._hostname,
            reported_at=self._clock(),
            driver_version=driver,
            gpus=gpus,
            errors=errors,
        )

    def _drain_events(self, errors: list[str]) -> None:
        nvml = self._nvml
        if self._events is None:
            return
        for _ in range(MAX_EVENTS_PER_READ):
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError as err:
                if getattr(err, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                    errors.append(f"xid events: {err}")
                return
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError as err:
                errors.append(f"xid {data.eventData} on an unknown GPU: {err}")
                continue
            instance = data.gpuInstanceId
            event = XidEvent(
                xid=int(data.eventData),
                at=self._clock(),
                gpu_instance_id=None if instance in (None, NO_INSTANCE) else int(instance),
            )
            self._xids.setdefault(uuid, deque(maxlen=self._keep)).append(event)
            counts = self._xid_counts.setdefault(uuid, {})
            counts[event.xid] = counts.get(event.xid, 0) + 1

    def _read_gpu(
        self, index: int, handle: Any, uuid: str, bus_to_uuid: dict[str, str]
    ) -> tuple[GpuReport, bool]:
        nvml = self._nvml
        errors: list[str] = []
        lost = False

        def call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
            nonlocal lost
            try:
                return fn(*args)
            except nvml.NVMLError as err:
                value = getattr(err, "value", None)
                if value == nvml.NVML_ERROR_GPU_IS_LOST:
                    lost = True
                if value != nvml.NVML_ERROR_NOT_SUPPORTED:
                    errors.append(f"{what}: {err}")
                return None

        name = call("name", nvml.nvmlDeviceGetName, handle)
        pci = call("pci", nvml.nvmlDeviceGetPciInfo, handle)
        memory = call("memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        mode = call("mig mode", nvml.nvmlDeviceGetMigMode, handle)
        mig_enabled = bool(mode and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE)
        utilization = None
        if not mig_enabled:  # NVML has no utilisation for a GPU in MIG mode
            utilization = call("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        ecc = call(
            "ecc",
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        migs = self._read_migs(handle, call) if mig_enabled else []
        peers, via_switch = self._read_nvlinks(handle, uuid, bus_to_uuid)
        report = GpuReport(
            index=index,
            uuid=uuid,
            name=_text(name) if name is not None else "unknown",
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else 0,
            memory_used_bytes=int(memory.used) if memory is not None else 0,
            utilization_gpu_pct=int(utilization.gpu) if utilization is not None else None,
            utilization_memory_pct=int(utilization.memory) if utilization is not None else None,
            mig_enabled=mig_enabled,
            mig_pending=bool(mode[1] == nvml.NVML_DEVICE_MIG_ENABLE) if mode else None,
            mig_devices=migs,
            nvlink_peers=peers,
            ecc_uncorrected_volatile=int(ecc) if ecc is not None else None,
            xid_critical_events=list(self._xids.get(uuid, ())),
            xid_critical_total=sum(self._xid_counts.get(uuid, {}).values()),
            xid_critical_counts=dict(self._xid_counts.get(uuid, {})),
            lost=lost,
            errors=errors,
        )
        return report, via_switch

    def _read_migs(self, handle: Any, call: Callable[..., Any]) -> list[MigDeviceReport]:
        nvml = self._nvml
        slots = call("mig device count", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        found: list[MigDeviceReport] = []
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as err:
                if getattr(err, "value", None) != nvml.NVML_ERROR_NOT_FOUND:
                    call(f"mig device {slot}", _raise, err)
                continue  # an empty slot
            uuid = call(f"mig device {slot} uuid", nvml.nvmlDeviceGetUUID, mig)
            if uuid is None:
                continue
            name = call(f"mig device {slot} name", nvml.nvmlDeviceGetName, mig)
            memory = call(f"mig device {slot} memory", nvml.nvmlDeviceGetMemoryInfo, mig)
            gi_id = call(f"mig device {slot} gi", nvml.nvmlDeviceGetGpuInstanceId, mig)
            ci_id = call(f"mig device {slot} ci", nvml.nvmlDeviceGetComputeInstanceId, mig)
            start = size = None
            if gi_id is not None:
                gi = call(f"gpu instance {gi_id}", nvml.nvmlDeviceGetGpuInstanceById, handle, gi_id)
                info = (
                    call(f"gpu instance {gi_id} info", nvml.nvmlGpuInstanceGetInfo, gi)
                    if gi
                    else None
                )
                if info is not None:
                    start, size = int(info.placement.start), int(info.placement.size)
            found.append(
                MigDeviceReport(
                    uuid=_text(uuid),
                    profile=mig_profile_from_name(_text(name)) if name is not None else None,
                    memory_total_bytes=int(memory.total) if memory is not None else 0,
                    memory_used_bytes=int(memory.used) if memory is not None else 0,
                    gpu_instance_id=gi_id,
                    compute_instance_id=ci_id,
                    placement_start=start,
                    placement_size=size,
                )
            )
        return found

    def _read_nvlinks(
        self, handle: Any, uuid: str, bus_to_uuid: dict[str, str]
    ) -> tuple[list[str], bool]:
        """Local GPUs at the other end of active links; and whether a link goes to an NVSwitch
        (then every switch-connected GPU of the node is a peer, joined in read())."""
        nvml = self._nvml
        peers: list[str] = []
        via_switch = False
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
            except nvml.NVMLError:
                continue  # no such link, or no NVLink at all
            try:
                kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except nvml.NVMLError:
                kind = nvml.NVML_NVLINK_DEVICE_TYPE_GPU  # older drivers lack the call
            if kind == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                via_switch = True
                continue
            try:
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            except nvml.NVMLError:
                continue
            peer = bus_to_uuid.get(normalize_pci_bus_id(_text(remote.busId)) or "")
            if peer and peer != uuid and peer not in peers:
                peers.append(peer)
        return peers, via_switch


def _raise(err: Exception) -> None:
    raise err


def _join_switch_peers(gpus: list[GpuReport], switch_connected: list[str]) -> list[GpuReport]:
    if len(switch_connected) < 2:
        return gpus
    out: list[GpuReport] = []
    for gpu in gpus:
        if gpu.uuid in switch_connected:
            extra = [u for u in switch_connected if u != gpu.uuid and u not in gpu.nvlink_peers]
            gpu = gpu.model_copy(update={"nvlink_peers": [*gpu.nvlink_peers, *extra]})
        out.append(gpu)
    return out
