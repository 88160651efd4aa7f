"""Typed JSON for ``/api/v1/snapshot``: pydantic models mirroring ``exporter.snapshot``.

FastAPI documents these in OpenAPI through ``response_model=SnapshotResponse``. ``null``
means "not supported or not read" (the same ``None`` the metrics leave out). Readings of
collector groups that are switched off are ``null`` and processes are omitted when the
``processes`` group is off, so the JSON never shows what ``/metrics`` was told to hide.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from exporter.catalogue import Group
from exporter.snapshot import GpuProcess, GpuReading, ProcessType
from exporter.state import ExporterState, ExpositionOptions

__all__ = ["EccModel", "GpuModel", "PodModel", "ProcessModel", "SnapshotResponse"]

_CONFIG = ConfigDict(frozen=True, extra="forbid")
_T = TypeVar("_T")


class PodModel(BaseModel):
    """The Kubernetes container a process runs in."""

    model_config = _CONFIG
    pod_uid: str = Field(description="Pod UID, from the process's cgroup.")
    container_id: str | None = Field(None, description="Container runtime ID.")
    namespace: str | None = Field(None, description="Pod namespace.")
    pod: str | None = Field(None, description="Pod name.")
    container: str | None = Field(None, description="Container name.")


class ProcessModel(BaseModel):
    """One process holding a context on a GPU."""

    model_config = _CONFIG
    pid: int = Field(description="Host PID, as NVML reports it.")
    type: ProcessType = Field(description="Which NVML process list(s) the process was found in.")
    used_memory_bytes: int | None = Field(
        description="GPU memory the driver handed to the process, in bytes (CUDA context plus "
        "framework cache plus tensors); null when NVML did not report it."
    )
    sm_utilization_ratio: float | None = Field(
        None, description="Share of the last sample period its kernels ran (0-1); null if none."
    )
    user: str | None = Field(None, description="Owner's user name (or uid); null if unknown.")
    uid: int | None = Field(None, description="Owner's numeric uid; null if unknown.")
    process_name: str | None = Field(None, description="Process name (comm); null if unknown.")
    start_time_seconds: float | None = Field(
        None, description="Process start time, Unix seconds; null if unknown."
    )
    cmdline: str | None = Field(
        None, description="Command line; null unless the operator opted in to collecting it."
    )
    pod: PodModel | None = Field(None, description="Kubernetes container; null on the host.")

    @classmethod
    def from_process(cls, process: GpuProcess, with_utilization: bool) -> ProcessModel:
        """Mirror one ``GpuProcess``."""
        owner, pod = process.owner, process.pod
        return cls(
            pid=process.pid,
            type=process.type,
            used_memory_bytes=process.used_memory_bytes,
            sm_utilization_ratio=process.sm_utilization_ratio if with_utilization else None,
            user=owner.user if owner else None,
            uid=owner.uid if owner else None,
            process_name=owner.name if owner else None,
            start_time_seconds=owner.start_time_seconds if owner else None,
            cmdline=owner.cmdline if owner else None,
            pod=None if pod is None else PodModel(
                pod_uid=pod.pod_uid,
                container_id=pod.container_id,
                namespace=pod.namespace,
                pod=pod.pod,
                container=pod.container,
            ),
        )


class EccModel(BaseModel):
    """ECC error counts since the driver loaded."""

    model_config = _CONFIG
    corrected: int = Field(description="Corrected (single-bit) errors.")
    uncorrected: int = Field(description="Uncorrected errors: any means data loss.")


def _opt(value: _T | None, group: Group, groups: frozenset[Group]) -> _T | None:
    """``value`` when ``group`` is switched on, else None (switched-off readings are hidden)."""
    return value if group in groups else None


class GpuModel(BaseModel):
    """One GPU: identity, readings of the last collection, processes."""

    model_config = _CONFIG
    index: int = Field(description="NVML device index.")
    uuid: str = Field(description="GPU UUID.")
    name: str = Field(description="Model name.")
    pci_bus_id: str = Field(description="PCI bus ID.")
    serial: str | None = Field(None, description="Board serial number.")
    vbios_version: str | None = Field(None, description="VBIOS version.")
    up: bool = Field(description="False when the GPU could not be read (then readings are null).")
    error: str | None = Field(None, description="Why the GPU could not be read.")
    memory_total_bytes: int | None = Field(None, description="Total memory, bytes.")
    memory_used_bytes: int | None = Field(None, description="Allocated memory, bytes.")
    memory_free_bytes: int | None = Field(None, description="Unallocated memory, bytes.")
    memory_reserved_bytes: int | None = Field(None, description="Driver reserve, bytes.")
    utilization_ratio: float | None = Field(None, description="Kernel-busy share, 0-1.")
    memory_utilization_ratio: float | None = Field(None, description="Memory-busy share, 0-1.")
    temperature_celsius: float | None = Field(None, description="Core temperature, Celsius.")
    power_usage_watts: float | None = Field(None, description="Board power draw, watts.")
    power_limit_watts: float | None = Field(None, description="Enforced power limit, watts.")
    power_limit_default_watts: float | None = Field(None, description="Default limit, watts.")
    energy_joules: float | None = Field(None, description="Energy since driver load, joules.")
    pcie_rx_bytes_per_second: float | None = Field(None, description="PCIe into GPU, B/s.")
    pcie_tx_bytes_per_second: float | None = Field(None, description="PCIe out of GPU, B/s.")
    fan_speed_ratio: float | None = Field(None, description="Fan speed, share of maximum, 0-1.")
    sm_clock_hertz: float | None = Field(None, description="SM clock, hertz.")
    memory_clock_hertz: float | None = Field(None, description="Memory clock, hertz.")
    graphics_clock_hertz: float | None = Field(None, description="Graphics clock, hertz.")
    performance_state: int | None = Field(None, description="P-state, 0 (max) to 15 (min).")
    throttle_reasons: dict[str, bool] | None = Field(
        None, description="Clock event (throttle) reason -> active."
    )
    ecc: EccModel | None = Field(None, description="ECC error counts since driver load.")
    processes: list[ProcessModel] = Field(
        default_factory=list, description="Processes with a context on this GPU."
    )

    @classmethod
    def from_reading(cls, gpu: GpuReading, groups: frozenset[Group]) -> GpuModel:
        """Mirror one ``GpuReading``, nulling readings of switched-off groups."""
        ident, g = gpu.identity, groups
        return cls(
            index=ident.index,
            uuid=ident.uuid,
            name=ident.name,
            pci_bus_id=ident.pci_bus_id,
            serial=ident.serial,
            vbios_version=ident.vbios_version,
            up=gpu.up,
            error=gpu.error,
            memory_total_bytes=_opt(ident.memory_total_bytes, Group.MEMORY, g),
            memory_used_bytes=_opt(gpu.memory_used_bytes, Group.MEMORY, g),
            memory_free_bytes=_opt(gpu.memory_free_bytes, Group.MEMORY, g),
            memory_reserved_bytes=_opt(gpu.memory_reserved_bytes, Group.MEMORY, g),
            utilization_ratio=_opt(gpu.utilization_ratio, Group.UTILIZATION, g),
            memory_utilization_ratio=_opt(gpu.memory_utilization_ratio, Group.UTILIZATION, g),
            temperature_celsius=_opt(gpu.temperature_celsius, Group.TEMPERATURE, g),
            power_usage_watts=_opt(gpu.power_usage_watts, Group.POWER, g),
            power_limit_watts=_opt(gpu.power_limit_watts, Group.POWER, g),
            power_limit_default_watts=_opt(ident.power_limit_default_watts, Group.POWER, g),
            energy_joules=_opt(gpu.energy_joules, Group.ENERGY, g),
            pcie_rx_bytes_per_second=_opt(gpu.pcie_rx_bytes_per_second, Group.PCIE, g),
            pcie_tx_bytes_per_second=_opt(gpu.pcie_tx_bytes_per_second, Group.PCIE, g),
            fan_speed_ratio=_opt(gpu.fan_speed_ratio, Group.FAN, g),
            sm_clock_hertz=_opt(gpu.sm_clock_hertz, Group.CLOCKS, g),
            memory_clock_hertz=_opt(gpu.memory_clock_hertz, Group.CLOCKS, g),
            graphics_clock_hertz=_opt(gpu.graphics_clock_hertz, Group.CLOCKS, g),
            performance_state=_opt(gpu.performance_state, Group.CLOCKS, g),
            throttle_reasons=(
                dict(gpu.throttle.active) if gpu.throttle and Group.THROTTLE in g else None
            ),
            ecc=(
                EccModel(corrected=gpu.ecc.corrected, uncorrected=gpu.ecc.uncorrected)
                if gpu.ecc and Group.ECC in g
                else None
            ),
            processes=(
                [
                    ProcessModel.from_process(p, Group.PROCESS_UTILIZATION in g)
                    for p in gpu.processes
                ]
                if Group.PROCESSES in g
                else []
            ),
        )


class SnapshotResponse(BaseModel):
    """The snapshot a scrape would serve now, with its freshness."""

    model_config = _CONFIG
    source: str = Field(description='Data source: "nvml" or "simulated".')
    hostname: str = Field(description="Host the exporter runs on.")
    taken_at: float = Field(description="When the collection started, Unix seconds.")
    duration_seconds: float = Field(description="How long the collection took, seconds.")
    data_age_seconds: float = Field(description="Age of this data now, seconds.")
    stale: bool = Field(description="True when the data is older than the freshness limit.")
    last_success_timestamp: float | None = Field(
        None, description="Last collection that read every GPU, Unix seconds; null if none yet."
    )
    source_up: bool = Field(description="False when the source itself is down (then no gpus).")
    source_error: str | None = Field(None, description="Why the source is down.")
    driver_version: str | None = Field(None, description="NVIDIA driver version.")
    cuda_driver_version: str | None = Field(None, description='CUDA driver API, e.g. "12.4".')
    nvml_version: str | None = Field(None, description="NVML library version.")
    errors: dict[str, int] = Field(
        default_factory=dict, description="Problems in this collection, by kind."
    )
    errors_total: dict[str, int] = Field(
        default_factory=dict, description="Problems since start, by kind."
    )
    gpus: list[GpuModel] = Field(default_factory=list, description="Every GPU, in index order.")

    @classmethod
    def from_state(cls, state: ExporterState, options: ExpositionOptions) -> SnapshotResponse:
        """Mirror ``state`` under ``options`` (groups switched off are hidden)."""
        snap = state.snapshot
        return cls(
            source=snap.source,
            hostname=snap.hostname,
            taken_at=snap.taken_at,
            duration_seconds=snap.duration_seconds,
            data_age_seconds=max(state.data_age_seconds, 0.0),
            stale=state.stale,
            last_success_timestamp=state.last_success_timestamp,
            source_up=snap.source_up,
            source_error=snap.source_error,
            driver_version=snap.driver_version,
            cuda_driver_version=snap.cuda_driver_version,
            nvml_version=snap.nvml_version,
            errors=dict(snap.errors),
            errors_total=dict(state.errors_total),
            gpus=[
                GpuModel.from_reading(g, options.groups)
                for g in sorted(snap.gpus, key=lambda g: g.identity.index)
            ],
        )
