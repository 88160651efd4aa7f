"""A fake ``pynvml`` (nvidia-ml-py) for tests: no GPU, no driver, fully scriptable.

``FakeNvml`` is a real ``types.ModuleType`` exposing the pynvml names the NVML source uses, with
the same error classes (``NVMLError`` and generated subclasses such as ``NVMLError_NotSupported``,
same ``value`` codes) and ``NVMLLibraryMismatchError`` for unversioned wrappers.

Build and use::

    from tests.sources.fake_nvml import FakeGpu, FakeNvml, FakeProcess, FakeSample, h200
    fake = FakeNvml([h200(0), h200(1)])           # two H200-like GPUs (fan NOT_SUPPORTED)
    source = NvmlSource(hostname="test", nvml=fake)  # or fake.install(monkeypatch) + NvmlSource()
    fake.gpus[0].compute = [FakeProcess(pid=100, used_memory=6 << 30)]
    fake.gpus[0].samples = [FakeSample(pid=100, timestamp=10, sm=87)]

Scripting (every knob may be changed between collections):

- ``FakeGpu`` fields hold the readings (``memory_used``, ``temperature``, ``power_mw`` ...),
  ``compute`` / ``graphics`` process lists (any objects with ``pid``/``usedGpuMemory`` work, so
  garbled entries are plain data), ``samples`` for per-process utilisation, ``unsupported``
  (C symbol names answering NOT_SUPPORTED, e.g. ``"nvmlDeviceGetFanSpeed"``,
  ``"nvmlDeviceGetMemoryInfo_v2"``), ``remapped`` / ``retired_pages`` / ``ecc_aggregate``
  (memory health; None: NOT_SUPPORTED), ``handle_error`` (code raised by
  ``nvmlDeviceGetHandleByIndex``), ``r535_layout`` (``_v3`` lists come back shuffled exactly as a
  24-byte reader sees the 32-byte entries of drivers 535.43-535.86).
- ``fake.lose(i)`` / ``fake.recover(i)``: GPU i answers GPU_IS_LOST to everything (incl. handles).
- ``fake.fail_init(code, times=1)``: ``nvmlInit`` raises ``code`` that many times (None: always).
- ``fake.break_library(code)`` / ``fake.fix_library()``: every call raises ``code``
  (e.g. ``NVML_ERROR_LIB_RM_VERSION_MISMATCH``) until fixed.
- ``fake.fail(symbol, code, gpu=None, times=None)``: one function raises ``code`` (``times``
  calls, None: always). ``symbol`` for ``fail``/``hang`` also covers its versioned C symbols:
  ``"nvmlDeviceGetMemoryInfo"`` matches ``nvmlDeviceGetMemoryInfo_v2`` too.
- ``fake.old_driver(*symbols)``: the driver lacks those C symbols (FunctionNotFound; the
  unversioned process wrappers raise NVMLLibraryMismatchError). ``OLD_DRIVER`` lists the usual set.
- ``fake.old_binding(*names)``: the binding lacks those Python functions (AttributeError).
- ``entered = fake.hang(symbol, gpu=None)``: matching calls block until ``fake.release()``
  (at most 60 s, so a forgotten release cannot wedge a test run);
  ``entered`` (a ``threading.Event``) is set once a call is blocked. ``release`` also clears it.
- ``fake.calls``: ``Counter`` of ``(symbol, gpu index or None)``; ``fake.init_count``,
  ``fake.shutdown_count``, ``fake.initialized``; ``gpu.utilization_queries`` (timestamps passed).
- GPM (``fake_nvml_gpm``): ``gpu.gpm`` (metric id -> value of the window ending at the second
  sample), ``gpu.gpm_instances`` (per MIG GPU instance), ``gpu.gpm_supported``,
  ``gpu.gpm_unsupported`` (metric ids), ``gpu.nvlink``; ``fake.samples_allocated``.
- Field values (``fake_nvml_fields``): ``gpu.fields``, ``gpu.field_errors``,
  ``gpu.violations``, ``gpu.nvlink_links``; ``gpu.minor`` for ``nvmlDeviceGetMinorNumber``.
- ``missing_pynvml(monkeypatch)``: ``import pynvml`` raises ImportError.
"""

from __future__ import annotations

import sys
import threading
import types
from collections import Counter
from typing import Any

import pytest

from tests.sources.fake_nvml_fields import FakeFields
from tests.sources.fake_nvml_gpm import FakeGpm
from tests.sources.fake_nvml_parts import (
    ERROR_CLASSES,
    ERROR_CODES,
    NOT_AVAILABLE,
    OLD_DRIVER,
    FakeGpu,
    FakeHandle,
    FakeProcess,
    FakeSample,
    NVMLError,
    NVMLLibraryMismatchError,
    h200,
    objects,
    r535_view,
)

__all__ = ["OLD_DRIVER", "FakeGpu", "FakeHandle", "FakeNvml", "FakeProcess", "FakeSample",
           "NVMLError", "NVMLLibraryMismatchError", "h200", "missing_pynvml"]


def _matches(name: str, symbol: str) -> bool:
    """``name`` is the C symbol or its unversioned stem (``_v2``/``_v3`` variants)."""
    return symbol == name or symbol.startswith(name + "_v")


class _Reading:
    """A device getter answering one ``FakeGpu`` field; the C symbol it enters is its name."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.symbol = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.symbol = name

    def __get__(self, fake: FakeNvml | None, owner: type | None = None) -> Any:
        if fake is None:
            return self
        return lambda h, *_args: getattr(fake._enter(self.symbol, h), self.field)


class FakeNvml(FakeGpm, FakeFields, types.ModuleType):
    """The fake module. See the module docstring for the scripting API."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    nvmlMemory_v2 = 0x02000028
    nvmlTemperature_v1 = 0x100000C

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "580.159.04",
                 cuda: int = 13000, nvml_version: str = "13.580.159.04") -> None:
        super().__init__("pynvml")
        self.__file__ = __file__
        for name, code in ERROR_CODES.items():
            setattr(self, "NVML_ERROR_" + name, code)
        for name, cls in ERROR_CLASSES.items():
            setattr(self, name, cls)
        self.gpus, self.driver, self.cuda, self.nvml_version = gpus, driver, cuda, nvml_version
        self.calls: Counter[tuple[str, int | None]] = Counter()
        self.initialized = False
        self.init_count = self.shutdown_count = 0
        self._init_failures: tuple[int, int | None] | None = None
        self._broken: int | None = None
        self._missing: set[str] = set()
        self._absent: set[str] = set()
        self._rules: list[list[Any]] = []  # [symbol, gpu or None, code, remaining or None]
        self._hangs: dict[tuple[str, int | None], threading.Event] = {}
        self._release = threading.Event()
        self.samples_allocated = []
        self.field_requests = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "_absent"):
            raise AttributeError(name)
        return super().__getattribute__(name)

    # --- scripting ---------------------------------------------------------------------------
    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make ``import pynvml`` return this fake."""
        monkeypatch.setitem(sys.modules, "pynvml", self)

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    def recover(self, index: int) -> None:
        self.gpus[index].lost = False

    def fail_init(self, code: int, times: int | None = 1) -> None:
        self._init_failures = (code, times)

    def break_library(self, code: int) -> None:
        self._broken = code

    def fix_library(self) -> None:
        self._broken = None

    def fail(
        self, symbol: str, code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        self._rules.append([symbol, gpu, code, times])

    def old_driver(self, *symbols: str) -> None:
        self._missing.update(symbols or OLD_DRIVER)

    def old_binding(self, *names: str) -> None:
        self._absent.update(names)

    def hang(self, symbol: str, gpu: int | None = None) -> threading.Event:
        self._release.clear()
        entered = threading.Event()
        self._hangs[(symbol, gpu)] = entered
        return entered

    def release(self) -> None:
        self._hangs.clear()
        self._release.set()

    # --- plumbing ----------------------------------------------------------------------------
    def _raise(self, code: int) -> None:
        raise NVMLError(code)

    def _enter(self, symbol: str, handle: Any = None) -> FakeGpu:
        index = handle.index if isinstance(handle, FakeHandle) else None
        self.calls[(symbol, index)] += 1
        entered = next((event for (name, gpu), event in self._hangs.items()
                        if _matches(name, symbol) and gpu in (None, index)), None)
        if entered is not None:
            entered.set()
            self._release.wait(timeout=60)
        if self._broken is not None:
            self._raise(self._broken)
        if not self.initialized:
            self._raise(1)
        if symbol in self._missing:
            self._raise(13)
        for rule in self._rules:
            if _matches(rule[0], symbol) and rule[1] in (None, index) and rule[3] != 0:
                if rule[3] is not None:
                    rule[3] -= 1
                self._raise(rule[2])
        if index is None:
            return self.gpus[0] if self.gpus else FakeGpu(uuid="none")
        gpu = self.gpus[index]
        if gpu.lost:
            self._raise(15)
        if symbol in gpu.unsupported:
            self._raise(3)
        return gpu

    # --- pynvml API --------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls[("nvmlInit", None)] += 1
        if self._init_failures is not None:
            code, times = self._init_failures
            if times is None or times > 0:
                self._init_failures = (code, None if times is None else times - 1)
                self._raise(code)
        if self._broken is not None:
            self._raise(self._broken)
        self.initialized = True
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount_v2")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        handle = FakeHandle(index)
        gpu = self._enter("nvmlDeviceGetHandleByIndex_v2", handle)
        if gpu.handle_error is not None:
            self._raise(gpu.handle_error)
        return handle

    # Getters that answer one FakeGpu field; each enters the C symbol it is named after.
    nvmlDeviceGetUUID = _Reading("uuid")
    nvmlDeviceGetName = _Reading("name")
    nvmlDeviceGetSerial = _Reading("serial")
    nvmlDeviceGetVbiosVersion = _Reading("vbios")
    nvmlDeviceGetPowerManagementDefaultLimit = _Reading("default_limit_mw")
    nvmlDeviceGetTemperatureV = _Reading("temperature")
    nvmlDeviceGetTemperature = _Reading("temperature")
    nvmlDeviceGetPowerUsage = _Reading("power_mw")
    nvmlDeviceGetEnforcedPowerLimit = _Reading("power_limit_mw")
    nvmlDeviceGetPerformanceState = _Reading("pstate")
    nvmlDeviceGetCurrentClocksEventReasons = _Reading("reasons_mask")
    nvmlDeviceGetCurrentClocksThrottleReasons = _Reading("reasons_mask")
    nvmlDeviceGetFanSpeed = _Reading("fan_percent")
    nvmlDeviceGetTotalEnergyConsumption = _Reading("energy_mj")

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=self._enter("nvmlDeviceGetPciInfo_v3", h).pci_bus_id)

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle, version: int | None = None) -> Any:
        if not version:
            g = self._enter("nvmlDeviceGetMemoryInfo", h)
            used = g.memory_used + g.memory_reserved  # v1 "used" includes the reserve
            return types.SimpleNamespace(total=g.memory_total, free=g.memory_total - used,
                                         used=used)
        g = self._enter("nvmlDeviceGetMemoryInfo_v2", h)
        if version != self.nvmlMemory_v2:
            self._raise(25)
        return types.SimpleNamespace(
            version=version, total=g.memory_total, reserved=g.memory_reserved, used=g.memory_used,
            free=g.memory_total - g.memory_used - g.memory_reserved)

    def nvmlDeviceGetBAR1MemoryInfo(self, h: FakeHandle) -> types.SimpleNamespace:
        self._enter("nvmlDeviceGetBAR1MemoryInfo", h)
        total, used = 274_877_906_944, 1_703_936  # measured on an H200
        return types.SimpleNamespace(bar1Total=total, bar1Free=total - used, bar1Used=used)

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> types.SimpleNamespace:
        g = self._enter("nvmlDeviceGetUtilizationRates", h)
        return types.SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetClockInfo(self, h: FakeHandle, clock: int) -> int:
        return self._enter("nvmlDeviceGetClockInfo", h).clocks_mhz[clock]

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, error_type: int, counter: int) -> int:
        g = self._enter("nvmlDeviceGetTotalEccErrors", h)
        return (g.ecc_aggregate if counter == self.NVML_AGGREGATE_ECC else g.ecc)[error_type]

    def nvmlDeviceGetRemappedRows(self, h: FakeHandle) -> tuple[int, int, int, int]:
        g = self._enter("nvmlDeviceGetRemappedRows", h)
        if g.remapped is None:
            self._raise(3)
        assert g.remapped is not None
        return g.remapped

    def nvmlDeviceGetRetiredPages(self, h: FakeHandle, cause: int) -> list[int]:
        g = self._enter("nvmlDeviceGetRetiredPages", h)
        if g.retired_pages is None:
            self._raise(3)
        assert g.retired_pages is not None
        return list(g.retired_pages.get(cause, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeHandle) -> int:
        g = self._enter("nvmlDeviceGetRetiredPagesPendingStatus", h)
        if g.retired_pages is None:
            self._raise(3)
        return g.retired_pending

    def nvmlDeviceGetPcieThroughput(self, h: FakeHandle, counter: int) -> int:
        g = self._enter("nvmlDeviceGetPcieThroughput", h)
        return g.pcie_tx_kbs if counter == self.NVML_PCIE_UTIL_TX_BYTES else g.pcie_rx_kbs

    def _processes(self, kind: str, version: str, h: FakeHandle) -> list[Any]:
        g = self._enter(f"nvmlDeviceGet{kind}RunningProcesses{version}", h)
        entries = g.compute if kind == "Compute" else g.graphics
        if version == "_v3" and g.r535_layout:
            return r535_view(entries)
        return objects(entries)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: FakeHandle) -> list[Any]:
        return self._processes("Compute", "_v3", h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeHandle) -> list[Any]:
        return self._processes("Compute", "_v2", h)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: FakeHandle) -> list[Any]:
        return self._processes("Graphics", "_v3", h)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: FakeHandle) -> list[Any]:
        return self._processes("Graphics", "_v2", h)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeHandle) -> list[Any]:
        if "nvmlDeviceGetComputeRunningProcesses_v3" in self._missing:
            raise NVMLLibraryMismatchError("use a versioned function")
        return self._processes("Compute", "_v3", h)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeHandle) -> list[Any]:
        if "nvmlDeviceGetGraphicsRunningProcesses_v3" in self._missing:
            raise NVMLLibraryMismatchError("use a versioned function")
        return self._processes("Graphics", "_v3", h)

    def _nvmlGetFunctionPointer(self, symbol: str) -> Any:
        """The C-level v1 process-list symbols, writing into ctypes arrays like the driver."""
        if symbol not in ("nvmlDeviceGetComputeRunningProcesses",
                          "nvmlDeviceGetGraphicsRunningProcesses") or symbol in self._missing:
            self._raise(13)

        def c_function(h: FakeHandle, count_ref: Any, array: Any) -> int:
            try:
                g = self._enter(symbol, h)
            except NVMLError as exc:
                return exc.value
            entries = g.compute if "Compute" in symbol else g.graphics
            count = count_ref._obj
            if array is None or count.value < len(entries):
                count.value = len(entries)
                return 7 if entries else 0
            for i, e in enumerate(entries):
                array[i].pid = e.pid
                array[i].usedGpuMemory = NOT_AVAILABLE if e.used_memory is None else e.used_memory
            count.value = len(entries)
            return 0

        return c_function

    def nvmlDeviceGetProcessUtilization(self, h: FakeHandle, timestamp: int) -> list[Any]:
        g = self._enter("nvmlDeviceGetProcessUtilization", h)
        g.utilization_queries.append(timestamp)
        fresh = [types.SimpleNamespace(pid=s.pid, timeStamp=s.timestamp, smUtil=s.sm,
                                       memUtil=s.mem, encUtil=0, decUtil=0)
                 for s in g.samples if s.timestamp > timestamp]
        if not fresh:
            self._raise(6)
        return fresh


def missing_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pynvml`` fail as if nvidia-ml-py were not installed."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


