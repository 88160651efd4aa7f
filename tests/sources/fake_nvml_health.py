"""The fake ``pynvml`` extended with event sets, MIG and memory health (row remapping, retired
pages, aggregate ECC). It wraps ``tests.sources.fake_nvml.FakeNvml`` without changing it.

Behaviour follows NVIDIA's NVML reference (nvml.h as vendored by NVIDIA/go-nvml; pynvml of
nvidia-ml-py 13.615.71 for names and return shapes). Calls and return codes relied on:

- ``nvmlInit`` / ``nvmlShutdown``: reference counted ("Shutdown only occurs when the reference
  count reaches zero"); ``initialized`` drops only at zero.
- ``nvmlDeviceGetSupportedEventTypes(h)``: the GPU's bitmask (an H200 answers 0xff9f).
- ``nvmlEventSetCreate()``; ``nvmlDeviceRegisterEvents(h, types, set)``: NOT_SUPPORTED (3) when
  any requested type is unsupported ("None of the requested eventTypes are registered");
  events that occurred before registration are not recorded.
- ``nvmlEventSetWait_v2(set, ms)``: the next queued event (``device``, ``eventType``,
  ``eventData`` = XID or 0, ``gpuInstanceId``/``computeInstanceId`` = 0xFFFFFFFF when not
  attributable) or TIMEOUT (10) after ``ms``; GPU_IS_LOST (15) when a registered GPU is lost
  (a blocked wait is woken by ``lose``). A freed set answers INVALID_ARGUMENT (2).
- ``nvmlEventSetFree(set)``.
- ``nvmlDeviceGetMigMode(h)`` -> ``[current, pending]``; NOT_SUPPORTED for a GPU without MIG.
- ``nvmlDeviceGetMaxMigDeviceCount(h)``: 0 "if MIG is not supported or enabled".
- ``nvmlDeviceGetMigDeviceHandleByIndex(h, i)``: NOT_FOUND (6) "if no valid MIG device was
  found at index" (indices are sparse), INVALID_ARGUMENT (2) beyond the maximum.
- ``nvmlDeviceGetGpuInstanceId`` / ``nvmlDeviceGetComputeInstanceId`` on a MIG handle;
  NOT_SUPPORTED on a parent handle. ``nvmlDeviceIsMigDeviceHandle`` returns a c_uint-like.
- ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)`` -> parent handle.
- ``nvmlDeviceGetName(mig)``: the MIG device name, ``"<GPU name> MIG <profile>"``.
- ``nvmlDeviceGetUUID(mig)``: ``MIG-<uuid>`` (R470+ format).
- ``nvmlDeviceGetMemoryInfo(mig)`` and ``nvmlDeviceGetComputeRunningProcesses*(mig)``: that
  instance's memory / processes (entries carry ``gpuInstanceId``/``computeInstanceId``). On the
  parent of a MIG GPU they answer aggregates only "if the caller has appropriate privileges",
  else NO_PERMISSION (4) (``mig_privileged=False``).
- ``nvmlDeviceGetGpuInstanceById(h, id)`` ("Requires privileged user": NO_PERMISSION otherwise,
  NOT_FOUND for an unknown id), ``nvmlGpuInstanceGetInfo(gi)`` -> ``id``/``profileId``,
  ``nvmlDeviceGetGpuInstanceProfileInfo(h, profile_index, version=2)`` -> ``id``, ``name``
  (bytes, ``b"MIG 1g.18gb"``), ``memorySizeMB``; INVALID_ARGUMENT past the last index,
  NOT_SUPPORTED for a profile this GPU lacks.
- ``nvmlDeviceGetUtilizationRates`` on a MIG-enabled GPU: NOT_SUPPORTED ("querying device
  utilization rates is not currently supported").
- ``nvmlDeviceGetRemappedRows(h)`` -> ``(corrected, uncorrected, pending, failure)``;
  NOT_SUPPORTED when MIG is enabled or the GPU lacks it (``remapped=None``).
- ``nvmlDeviceGetRetiredPages(h, cause)`` -> addresses; ``...PendingStatus(h)`` -> 0/1;
  NOT_SUPPORTED on Hopper (``retired_pages=None``, the H200 default).
- ``nvmlDeviceGetTotalEccErrors(h, type, counter)``: counter NVML_VOLATILE_ECC (0) or
  NVML_AGGREGATE_ECC (1).

Scripting: ``fake.emit(i, event_type, data=0, gi=None, ci=None)`` queues an event for every set
that registered that type on GPU i; ``fake.xid(i, code, ...)`` is the XID shorthand.
``fake.event_sets`` lists the sets created (``.freed``, ``.registered``).
"""

from __future__ import annotations

import threading
import types
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.sources.fake_nvml import FakeGpu, FakeHandle, FakeNvml, FakeProcess, h200
from tests.sources.fake_nvml_parts import NO_INSTANCE, NVMLError, objects

H200_EVENTS = 0xFF9F  # nvmlDeviceGetSupportedEventTypes on an H200 (driver 580)
MiB = 1 << 20

#: H200 141GB GPU instance profiles (MIG user guide): index -> (profile id, name, memory MiB).
#: Profile ids are illustrative: real code must read them from the API, never hard-code them.
H200_PROFILES: dict[int, tuple[int, str, int]] = {
    0: (19, "1g.18gb", 17_920), 1: (14, "2g.35gb", 35_840), 2: (9, "3g.71gb", 71_680),
    3: (5, "4g.71gb", 71_680), 4: (0, "7g.141gb", 143_360), 7: (15, "1g.35gb", 35_840),
}


@dataclass
class FakeMigDevice:
    """One MIG device (a compute instance inside a GPU instance)."""

    gpu_instance: int
    compute_instance: int
    profile: str  # GPU instance profile, e.g. "1g.18gb"
    uuid: str
    memory_total: int
    memory_used: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    compute_slices: int | None = None  # set when the CI is smaller than its GI ("1c.3g.71gb")


@dataclass
class FakeHealthGpu(FakeGpu):
    """A fake GPU with events, MIG and memory-health state."""

    supported_events: int = H200_EVENTS
    refused_events: int = 0  # reported supported, yet registration answers NOT_SUPPORTED
    retired_pages: dict[int, list[int]] | None = None  # cause -> addresses; None: Hopper
    mig_mode: tuple[int, int] | None = (0, 0)  # (current, pending); None: not MIG-capable
    mig_slots: int = 7  # nvmlDeviceGetMaxMigDeviceCount while MIG is on
    mig_devices: dict[int, FakeMigDevice] = field(default_factory=dict)  # slot -> device
    mig_privileged: bool = True  # parent aggregates and GPU-instance lookups allowed


def h200_health(index: int, **changes: Any) -> FakeHealthGpu:
    """An H200-like health GPU (events 0xff9f, remapping supported, no retired pages)."""
    base = h200(index)
    values = {name: getattr(base, name) for name in ("uuid", "pci_bus_id", "unsupported")}
    values.update(changes)
    return FakeHealthGpu(**values)


def mig_device(index: int, gi: int, ci: int, profile: str, memory_total: int,
               **changes: Any) -> FakeMigDevice:
    """A MIG device with a UUID derived from its parent and instance ids."""
    values: dict[str, Any] = {"uuid": f"MIG-{index:08x}-{gi:04x}-{ci:04x}-8000-00000000mig0"}
    values.update(changes)
    return FakeMigDevice(gpu_instance=gi, compute_instance=ci, profile=profile,
                         memory_total=memory_total, **values)


@dataclass(frozen=True)
class FakeMigHandle(FakeHandle):
    """What ``nvmlDeviceGetMigDeviceHandleByIndex`` returns (``index`` is the parent's)."""

    slot: int


@dataclass(frozen=True)
class FakeGpuInstance:
    index: int
    gpu_instance: int


class FakeEventSet:
    """An NVML event set: registrations per GPU and a queue of events."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # GPU index -> event mask
        self.queue: deque[types.SimpleNamespace] = deque()
        self.freed = False


class FakeHealthNvml(FakeNvml):
    """``FakeNvml`` plus events, MIG and memory health. See the module docstring."""

    nvmlEventTypeSingleBitEccError = 0x1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypePState = 0x4
    nvmlEventTypeXidCriticalError = 0x8
    nvmlEventTypeClock = 0x10
    nvmlEventTypePowerSourceChange = 0x80
    nvmlEventMigConfigChange = 0x100
    nvmlEventTypeSingleBitEccErrorStorm = 0x200
    nvmlEventTypeDramRetirementEvent = 0x400
    nvmlEventTypeDramRetirementFailure = 0x800
    nvmlEventTypeNonFatalPoisonError = 0x1000
    nvmlEventTypeFatalPoisonError = 0x2000
    nvmlEventTypeGpuUnavailableError = 0x4000
    nvmlEventTypeGpuRecoveryAction = 0x8000
    nvmlEventTypeNone = 0
    NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    gpus: list[FakeHealthGpu]  # type: ignore[assignment]

    def __init__(self, gpus: list[FakeHealthGpu], **kwargs: Any) -> None:
        super().__init__(list(gpus), **kwargs)
        self.refs = 0
        self.event_sets: list[FakeEventSet] = []
        self._events = threading.Condition()

    # --- scripting ---------------------------------------------------------------------------
    def emit(self, index: int, event_type: int, data: int = 0, gi: int | None = None,
             ci: int | None = None) -> int:
        """Queue an event on every set registered for it; returns how many sets got it."""
        delivered = 0
        with self._events:
            for event_set in self.event_sets:
                if not event_set.freed and event_set.registered.get(index, 0) & event_type:
                    event_set.queue.append(types.SimpleNamespace(
                        device=FakeHandle(index), eventType=event_type, eventData=data,
                        gpuInstanceId=NO_INSTANCE if gi is None else gi,
                        computeInstanceId=NO_INSTANCE if ci is None else ci))
                    delivered += 1
            self._events.notify_all()
        return delivered

    def xid(self, index: int, code: int, gi: int | None = None, ci: int | None = None) -> int:
        return self.emit(index, self.nvmlEventTypeXidCriticalError, code, gi, ci)

    def lose(self, index: int) -> None:
        with self._events:
            super().lose(index)
            self._events.notify_all()

    def live_sets(self) -> list[FakeEventSet]:
        return [s for s in self.event_sets if not s.freed]

    # --- init reference count ----------------------------------------------------------------
    def nvmlInit(self) -> None:
        super().nvmlInit()
        self.refs += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.refs -= 1
        self.shutdown_count += 1
        if self.refs <= 0:
            self.refs = 0
            self.initialized = False

    # --- events ------------------------------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, h: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetSupportedEventTypes", h).supported_events

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        event_set = FakeEventSet()
        with self._events:
            self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, h: FakeHandle, types_: int, event_set: FakeEventSet) -> None:
        gpu = self._gpu("nvmlDeviceRegisterEvents", h)
        if isinstance(h, FakeMigHandle):  # per-instance registration is not supported
            self._raise(3)
        if event_set.freed:
            self._raise(2)
        if types_ & (~gpu.supported_events | gpu.refused_events):
            self._raise(3)
        with self._events:
            event_set.registered[h.index] = event_set.registered.get(h.index, 0) | types_

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        if event_set.freed:
            self._raise(2)
        with self._events:
            ready = self._events.wait_for(
                lambda: event_set.queue or self._lost_in(event_set), timeout=timeoutms / 1000)
            if not ready:
                self._raise(10)
            if self._lost_in(event_set):
                self._raise(15)
            return event_set.queue.popleft()

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeoutms: int) -> Any:
        return self.nvmlEventSetWait_v2(event_set, timeoutms)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._enter("nvmlEventSetFree")
        with self._events:
            event_set.freed = True
            self._events.notify_all()

    def _lost_in(self, event_set: FakeEventSet) -> bool:
        return any(self.gpus[i].lost for i in event_set.registered)

    # --- MIG ---------------------------------------------------------------------------------
    def _gpu(self, symbol: str, h: FakeHandle) -> FakeHealthGpu:
        gpu = self._enter(symbol, h)
        assert isinstance(gpu, FakeHealthGpu)
        return gpu

    def _mig(self, symbol: str, h: FakeHandle) -> FakeMigDevice | None:
        """The MIG device behind ``h`` (None for a parent handle)."""
        gpu = self._gpu(symbol, h)
        if not isinstance(h, FakeMigHandle):
            return None
        device = gpu.mig_devices.get(h.slot)
        if device is None or not self._mig_on(gpu):  # destroyed since: the handle is invalid
            self._raise(2)
        return device

    @staticmethod
    def _mig_on(gpu: FakeHealthGpu) -> bool:
        return gpu.mig_mode is not None and gpu.mig_mode[0] == 1

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", h)
        if gpu.mig_mode is None:
            self._raise(3)
        assert gpu.mig_mode is not None
        return list(gpu.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", h)
        return gpu.mig_slots if self._mig_on(gpu) else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeHandle, index: int) -> FakeMigHandle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if not self._mig_on(gpu) or index >= gpu.mig_slots:
            self._raise(2)
        if index not in gpu.mig_devices:
            self._raise(6)
        return FakeMigHandle(h.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, h: FakeHandle) -> Any:
        self._gpu("nvmlDeviceIsMigDeviceHandle", h)
        return types.SimpleNamespace(value=int(isinstance(h, FakeMigHandle)))

    def _mig_only(self, symbol: str, h: FakeHandle) -> FakeMigDevice:
        """The MIG device behind ``h``; NOT_SUPPORTED for a parent handle."""
        device = self._mig(symbol, h)
        if device is None:
            self._raise(3)
        assert device is not None
        return device

    def nvmlDeviceGetGpuInstanceId(self, h: FakeHandle) -> int:
        return self._mig_only("nvmlDeviceGetGpuInstanceId", h).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, h: FakeHandle) -> int:
        return self._mig_only("nvmlDeviceGetComputeInstanceId", h).compute_instance

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: FakeHandle) -> FakeHandle:
        if self._mig("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h) is None:
            self._raise(2)
        return FakeHandle(h.index)

    def nvmlDeviceGetGpuInstanceById(self, h: FakeHandle, gi: int) -> FakeGpuInstance:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceById", h)
        if not self._mig_on(gpu):
            self._raise(3)
        if not gpu.mig_privileged:
            self._raise(4)
        if all(d.gpu_instance != gi for d in gpu.mig_devices.values()):
            self._raise(6)
        return FakeGpuInstance(h.index, gi)

    def nvmlGpuInstanceGetInfo(self, gi: FakeGpuInstance) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        gpu = self.gpus[gi.index]
        device = next(d for d in gpu.mig_devices.values() if d.gpu_instance == gi.gpu_instance)
        profile_id = next(pid for pid, name, _ in H200_PROFILES.values()
                          if name == device.profile)
        return types.SimpleNamespace(device=FakeHandle(gi.index), id=gi.gpu_instance,
                                     profileId=profile_id,
                                     placement=types.SimpleNamespace(start=0, size=1))

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: FakeHandle, profile: int,
                                            version: int = 2) -> Any:
        self._gpu("nvmlDeviceGetGpuInstanceProfileInfoV", h)
        if profile >= self.NVML_GPU_INSTANCE_PROFILE_COUNT:
            self._raise(2)
        if profile not in H200_PROFILES:
            self._raise(3)
        profile_id, name, memory_mib = H200_PROFILES[profile]
        return types.SimpleNamespace(version=version, id=profile_id, memorySizeMB=memory_mib,
                                     name=f"MIG {name}".encode())

    # --- MIG-aware overrides of existing calls -----------------------------------------------
    def nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        device = self._mig("nvmlDeviceGetUUID", h)
        return self.gpus[h.index].uuid if device is None else device.uuid

    def nvmlDeviceGetName(self, h: FakeHandle) -> str:
        device = self._mig("nvmlDeviceGetName", h)
        gpu = self.gpus[h.index]
        if device is None:
            return gpu.name
        compute = "" if device.compute_slices is None else f"{device.compute_slices}c."
        return f"{gpu.name} MIG {compute}{device.profile}"

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle, version: int | None = None) -> Any:
        if not isinstance(h, FakeMigHandle):
            gpu = self.gpus[h.index] if h.index < len(self.gpus) else None
            if gpu is not None and self._mig_on(gpu) and not gpu.mig_privileged:
                self._enter("nvmlDeviceGetMemoryInfo", h)
                self._raise(4)
            return super().nvmlDeviceGetMemoryInfo(h, version)
        device = self._mig("nvmlDeviceGetMemoryInfo", h)
        assert device is not None
        free = device.memory_total - device.memory_used
        if version:
            return types.SimpleNamespace(version=version, total=device.memory_total, reserved=0,
                                         used=device.memory_used, free=free)
        return types.SimpleNamespace(total=device.memory_total, used=device.memory_used, free=free)

    def _processes(self, kind: str, version: str, h: FakeHandle) -> list[Any]:
        symbol = f"nvmlDeviceGet{kind}RunningProcesses{version}"
        if isinstance(h, FakeMigHandle):
            device = self._mig(symbol, h)
            assert device is not None
            entries = device.processes if kind == "Compute" else []
            return objects(list(entries))
        gpu = self.gpus[h.index]
        if self._mig_on(gpu):
            self._gpu(symbol, h)
            if not gpu.mig_privileged:
                self._raise(4)
            if kind != "Compute":
                return []
            return objects([p for d in gpu.mig_devices.values() for p in d.processes])
        return super()._processes(kind, version, h)

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> types.SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", h)
        if self._mig_on(gpu) or isinstance(h, FakeMigHandle):
            self._raise(3)
        return types.SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    # --- memory health -----------------------------------------------------------------------
    def nvmlDeviceGetRemappedRows(self, h: FakeHandle) -> tuple[int, int, int, int]:
        gpu = self._gpu("nvmlDeviceGetRemappedRows", h)
        if gpu.remapped is None or self._mig_on(gpu):
            self._raise(3)
        assert gpu.remapped is not None
        return gpu.remapped


__all__ = ["H200_EVENTS", "H200_PROFILES", "FakeEventSet", "FakeHealthGpu", "FakeHealthNvml",
           "FakeMigDevice", "FakeMigHandle", "NVMLError", "h200_health", "mig_device"]
