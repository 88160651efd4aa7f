"""Building blocks of the fake ``pynvml`` (see ``tests.sources.fake_nvml`` for the API).

The NVML error class hierarchy (same codes and generated subclass names as nvidia-ml-py), the
fake GPU / process / sample records, and the R535 shuffled-struct view.
"""

from __future__ import annotations

import ctypes
import string
import types
from dataclasses import dataclass, field
from typing import Any

ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5, "NOT_FOUND": 6, "INSUFFICIENT_SIZE": 7, "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "IRQ_ISSUE": 11, "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13, "CORRUPTED_INFOROM": 14, "GPU_IS_LOST": 15, "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17, "LIB_RM_VERSION_MISMATCH": 18, "IN_USE": 19, "MEMORY": 20,
    "NO_DATA": 21, "VGPU_ECC_NOT_SUPPORTED": 22, "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24, "ARGUMENT_VERSION_MISMATCH": 25, "DEPRECATED": 26,
    "NOT_READY": 27, "GPU_NOT_FOUND": 28, "INVALID_STATE": 29, "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}
NOT_AVAILABLE = 2**64 - 1
NO_INSTANCE = 0xFFFFFFFF
OLD_DRIVER = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
              "nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons",
              "nvmlDeviceGetMemoryInfo_v2")


class NVMLLibraryMismatchError(Exception):
    """Like pynvml's: an unversioned wrapper met a driver without the newest symbol."""


class NVMLError(Exception):
    """Like pynvml's: ``NVMLError(code)`` builds the subclass registered for ``code``."""

    value: int
    _by_code: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - mirrors pynvml's class table

    def __new__(cls, value: int) -> NVMLError:
        target = NVMLError._by_code.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        for name, code in ERROR_CODES.items():
            if code == self.value:
                return name.replace("_", " ").capitalize()
        return f"NVML Error with code {self.value}"


ERROR_CLASSES: dict[str, type[NVMLError]] = {}
for _name, _code in ERROR_CODES.items():
    _cls_name = "NVMLError_" + string.capwords(_name, "_").replace("_", "")

    def _make_new(code: int) -> Any:
        def new(cls: type[NVMLError], *args: Any) -> NVMLError:
            return NVMLError.__new__(cls, code)
        return new

    _cls = type(_cls_name, (NVMLError,), {"__new__": _make_new(_code),
                                          "__init__": lambda self, *a: Exception.__init__(self)})
    NVMLError._by_code[_code] = _cls
    ERROR_CLASSES[_cls_name] = _cls
    globals()[_cls_name] = _cls


@dataclass
class FakeProcess:
    """A process entry as the binding returns it (``used_memory`` None = N/A)."""

    pid: int
    used_memory: int | None
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE


@dataclass
class FakeSample:
    """One per-process utilisation sample (``timestamp`` in microseconds)."""

    pid: int
    timestamp: int
    sm: int
    mem: int = 0


@dataclass
class FakeGpu:
    """One fake GPU: identity, current readings and scripted behaviour."""

    uuid: str
    name: str = "NVIDIA H200"
    pci_bus_id: str = "00000000:19:00.0"
    serial: str = "1650924000001"
    vbios: str = "96.00.99.00.01"
    memory_total: int = 150_754_820_096
    memory_used: int = 1_048_576
    memory_reserved: int = 594_411_520
    util_gpu: int = 0
    util_memory: int = 0
    temperature: int = 31
    power_mw: int = 75_123
    power_limit_mw: int = 700_000
    default_limit_mw: int = 700_000
    energy_mj: int = 123_456_789
    pcie_rx_kbs: int = 1000
    pcie_tx_kbs: int = 2000
    fan_percent: int = 40
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {0: 345, 1: 345, 2: 3201})
    pstate: int = 0
    reasons_mask: int = 0x1
    ecc: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})  # volatile, by type
    ecc_aggregate: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})  # lifetime
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # None: NOT_SUPPORTED
    retired_pages: dict[int, list[int]] | None = field(  # cause -> addresses; None: Hopper+
        default_factory=lambda: {0: [], 1: []})
    retired_pending: int = 0
    compute: list[Any] = field(default_factory=list)
    graphics: list[Any] = field(default_factory=list)
    samples: list[FakeSample] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    handle_error: int | None = None
    lost: bool = False
    r535_layout: bool = False
    utilization_queries: list[int] = field(default_factory=list)
    # GPM: what nvmlGpmMetricsGet answers for a window ending now, by metric id (absent: 0.0);
    # per MIG GPU instance the same; metric ids answering NOT_SUPPORTED on their own.
    gpm_supported: bool = True
    gpm: dict[int, float] = field(default_factory=dict)
    gpm_instances: dict[int, dict[int, float]] = field(default_factory=dict)
    gpm_unsupported: set[int] = field(default_factory=set)
    nvlink: bool = False
    # Field values (``tests.sources.fake_nvml_fields``): (field id, scope) -> value, on top of
    # what an H100 answers (the throttle-time fields; with ``nvlink``, NVLink fields of
    # ``nvlink_links`` links); (field id, scope) -> the code that entry answers instead;
    # perf policy -> violation time in ns (absent: NOT_SUPPORTED).
    fields: dict[tuple[int, int], float] = field(default_factory=dict)
    field_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    violations: dict[int, int] = field(default_factory=dict)
    nvlink_links: int = 4
    minor: int | None = None  # nvmlDeviceGetMinorNumber (None: NOT_SUPPORTED)


def h200(index: int, **changes: Any) -> FakeGpu:
    """An H200-like GPU (no fan, so ``nvmlDeviceGetFanSpeed`` is NOT_SUPPORTED)."""
    values: dict[str, Any] = {"uuid": f"GPU-{index:08x}-fake-4000-8000-{index:012x}",
                              "pci_bus_id": f"00000000:{0x19 + index:02X}:00.0",
                              "unsupported": {"nvmlDeviceGetFanSpeed"}}
    values.update(changes)
    return FakeGpu(**values)


@dataclass(frozen=True)
class FakeHandle:
    """What ``nvmlDeviceGetHandleByIndex`` returns."""

    index: int


class _Entry24(ctypes.Structure):
    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint))


class _Entry32(ctypes.Structure):
    _fields_ = (*_Entry24._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong))



def r535_view(processes: list[FakeProcess]) -> list[types.SimpleNamespace]:
    """What a 24-byte reader sees when the driver wrote 32-byte entries (R535.43-535.86)."""
    entries = (_Entry32 * len(processes))()
    for slot, p in zip(entries, processes, strict=True):
        slot.pid, slot.gpuInstanceId, slot.computeInstanceId = (
            p.pid, p.gpu_instance_id, p.compute_instance_id)
        slot.usedGpuMemory = NOT_AVAILABLE if p.used_memory is None else p.used_memory
    seen = ctypes.cast(entries, ctypes.POINTER(_Entry24))
    return [_friendly(seen[i].pid, seen[i].usedGpuMemory, seen[i].gpuInstanceId,
                      seen[i].computeInstanceId) for i in range(len(processes))]


def _friendly(pid: int, memory: int | None, gi: int, ci: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(pid=pid, usedGpuMemory=None if memory == NOT_AVAILABLE else memory,
                                 gpuInstanceId=gi, computeInstanceId=ci)


def objects(entries: list[Any]) -> list[Any]:
    return [_friendly(e.pid, e.used_memory, e.gpu_instance_id, e.compute_instance_id)
            if isinstance(e, FakeProcess) else e for e in entries]
