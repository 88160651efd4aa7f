"""Plain dataclasses for GPU health in the snapshot: XID/event counts, MIG devices, memory repair.

Part of the snapshot (``exporter.snapshot``): immutable, base units, ``None`` = not reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class XidKey:
    """What one XID counter is kept per: the code and, under MIG, the instance it hit."""

    xid: int
    gpu_instance: int | None = None  # MIG GPU instance ID, when NVML attributes the XID
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class XidStat:
    """How often one XID was seen since the waiter started, and when last (Unix seconds)."""

    count: int
    last_seconds: float


@dataclass(frozen=True, slots=True)
class GpuEvents:
    """Events of one GPU since the waiter started."""

    index: int
    uuid: str
    registered: bool = False  # True while XID events are registered for this GPU
    watched: tuple[str, ...] = ()  # names of the registered event types ("xid", HEALTH_EVENTS)
    error: str | None = None  # why events are not (or no longer) watched
    xids: Mapping[XidKey, XidStat] = field(default_factory=lambda: MappingProxyType({}))
    events: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class EventCounts:
    """Everything the waiter knows, by GPU index. Immutable: safe to read from any thread."""

    gpus: Mapping[int, GpuEvents] = field(default_factory=lambda: MappingProxyType({}))
    running: bool = False


@dataclass(frozen=True, slots=True)
class MigProcess:
    """One process on one MIG device, as NVML lists it on the MIG handle."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device: a compute instance inside a GPU instance of a parent GPU."""

    gpu_instance: int  # GI id, unique per parent GPU (dcgm-exporter's GPU_I_ID)
    compute_instance: int  # CI id, unique per GPU instance
    uuid: str  # MIG-<uuid>
    profile: str  # GPU instance profile, e.g. "1g.18gb" (dcgm-exporter's GPU_I_PROFILE)
    memory_used_bytes: int | None = None  # of the GPU instance (shared by its CIs)
    memory_total_bytes: int | None = None
    processes: tuple[MigProcess, ...] = ()
    #: GPM figures of the GPU instance (shared by its CIs), by the per-GPU row's name.
    activity: Mapping[str, float | Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping state of one GPU (Ampere and newer)."""

    corrected: int  # rows remapped after correctable errors
    uncorrected: int  # rows remapped after uncorrectable errors
    pending: bool  # a remap waits for a GPU reset to take effect
    failure: bool  # a remap failed at some point: the GPU is out of spare rows (RMA)


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Dynamic page retirement (GPUs before Ampere)."""

    single_bit: int  # pages retired after multiple single-bit errors
    double_bit: int  # pages retired after a double-bit error
    pending: bool | None  # pages wait for a reboot/reset to be retired (None: unknown)
