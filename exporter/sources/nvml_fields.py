"""Reading one GPU through NVML: static identity once, then the enabled field groups.

Everything that can be looked up once (bound functions, constants, cached throttle maps) is
looked up once, so a collection is little more than the NVML calls themselves.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from exporter.catalogue import THROTTLE_REASONS, UNKNOWN_VALUE
from exporter.snapshot import EccCounts, GpuIdentity, GpuReading, ThrottleReasons
from exporter.sources.base import CollectOptions
from exporter.sources.nvml_errors import (
    GPU_DOWN_KINDS,
    GpuDown,
    NvmlFatal,
    Reaction,
    describe,
    reaction_for,
)
from exporter.sources.nvml_procs import (
    ProcessLister,
    clean_entries,
    merge_processes,
    newest_samples,
    process_utilization_call,
)

log = logging.getLogger(__name__)

#: Clock event reason bits from nvml.h, in catalogue.THROTTLE_REASONS order.
_REASON_BITS: Final = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)
THROTTLE_BITS: Final = tuple(zip(THROTTLE_REASONS, _REASON_BITS, strict=True))
#: PCIe throughput comes in KB/s (KiB, as nvidia-smi's MB/s in dmon are MiB).
_KIB: Final = 1024
_MAX_PSTATE: Final = 15  # NVML returns 32 for "unknown"


@dataclass(eq=False, slots=True)
class GpuState:
    """What the source keeps per GPU index between collections."""

    index: int
    identity: GpuIdentity
    handle: Any = None  # None: not acquired yet, or dropped after the GPU was lost
    identity_known: bool = False
    error: str | None = None  # why the GPU is not answering (handle refused, lost, ...)
    unsupported: set[str] = field(default_factory=set)  # fields never to ask for again
    last_seen_timestamp: int = 0  # newest process-utilisation sample seen (microseconds)
    garbled_seen: bool = False  # garbled process entries were already reported in the log


def placeholder_identity(index: int) -> GpuIdentity:
    """Identity for a GPU whose handle could not be opened (so nothing is known about it)."""
    return GpuIdentity(index=index, uuid=UNKNOWN_VALUE, name=UNKNOWN_VALUE,
                       pci_bus_id=UNKNOWN_VALUE, memory_total_bytes=0)


def _optional(nvml: ModuleType, name: str, handle: Any) -> Any:
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(handle)
    except nvml.NVMLError as exc:
        log.debug("GPU identity field %s unavailable: %s", name, describe(exc))
        return None


def read_identity(nvml: ModuleType, index: int, handle: Any) -> GpuIdentity:
    """Static facts of one GPU.

    Raises:
        NVMLError: UUID, name, PCI info or memory total could not be read.
    """
    default_limit = _optional(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    serial = _optional(nvml, "nvmlDeviceGetSerial", handle)
    vbios = _optional(nvml, "nvmlDeviceGetVbiosVersion", handle)
    return GpuIdentity(
        index=index,
        uuid=str(nvml.nvmlDeviceGetUUID(handle)),
        name=str(nvml.nvmlDeviceGetName(handle)),
        pci_bus_id=str(nvml.nvmlDeviceGetPciInfo(handle).busId),
        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        serial=str(serial) if serial else None,
        vbios_version=str(vbios) if vbios else None,
        power_limit_default_watts=None if default_limit is None else default_limit / 1000.0,
    )


class NvmlCalls:
    """The binding's functions and constants, resolved once per ``start``.

    A function the binding lacks is ``None``; the reader then treats the field as unsupported.
    """

    def __init__(self, nvml: ModuleType) -> None:
        def get(name: str) -> Any:
            return getattr(nvml, name, None)

        self.error: type[BaseException] = nvml.NVMLError
        self.mismatch: type[BaseException] | tuple[()] = get("NVMLLibraryMismatchError") or ()
        memory = nvml.nvmlDeviceGetMemoryInfo
        v2 = get("nvmlMemory_v2")
        self.memory_v2 = None if v2 is None else functools.partial(memory, version=v2)
        self.memory_v1 = memory
        self.utilization = get("nvmlDeviceGetUtilizationRates")
        self.temperature_v = get("nvmlDeviceGetTemperatureV")
        self.temperature = get("nvmlDeviceGetTemperature")
        self.temperature_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        self.power_usage = get("nvmlDeviceGetPowerUsage")
        self.power_limit = get("nvmlDeviceGetEnforcedPowerLimit")
        self.clock_info = get("nvmlDeviceGetClockInfo")
        self.clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self.clock_mem = getattr(nvml, "NVML_CLOCK_MEM", 2)
        self.clock_graphics = getattr(nvml, "NVML_CLOCK_GRAPHICS", 0)
        self.pstate = get("nvmlDeviceGetPerformanceState")
        self.event_reasons = get("nvmlDeviceGetCurrentClocksEventReasons")
        self.throttle_reasons = get("nvmlDeviceGetCurrentClocksThrottleReasons")
        self.ecc = get("nvmlDeviceGetTotalEccErrors")
        self.ecc_corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        self.ecc_uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        self.ecc_volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
        self.fan = get("nvmlDeviceGetFanSpeed")
        self.energy = get("nvmlDeviceGetTotalEnergyConsumption")
        self.pcie = get("nvmlDeviceGetPcieThroughput")
        self.pcie_rx = getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1)
        self.pcie_tx = getattr(nvml, "NVML_PCIE_UTIL_TX_BYTES", 0)
        self.compute = ProcessLister(nvml, "Compute")
        self.graphics = ProcessLister(nvml, "Graphics")
        self.process_utilization = process_utilization_call(nvml)


class GpuReader:
    """Reads GPUs for one collection, counting problems into ``errors``."""

    def __init__(
        self, calls: NvmlCalls, errors: dict[str, int], throttle_cache: dict[int, ThrottleReasons]
    ) -> None:
        self._c = calls
        self._error = calls.error
        self._mismatch = calls.mismatch
        self.errors = errors
        self._throttle_cache = throttle_cache

    def count(self, kind: str, n: int = 1) -> None:
        """Add ``n`` to the ``kind`` error counter of this collection."""
        self.errors[kind] = self.errors.get(kind, 0) + n

    def call(self, gpu: GpuState, name: str, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """One NVML call for one field; None when unsupported or failed.

        Raises:
            GpuDown: the GPU is lost, needs a reset, or answered "unknown error".
            NvmlFatal: NVML itself stopped working.
        """
        if name in gpu.unsupported:
            return None
        if fn is None:
            gpu.unsupported.add(name)
            return None
        try:
            return fn(gpu.handle, *args)
        except self._mismatch:
            gpu.unsupported.add(name)
            return None
        except self._error as exc:
            code = getattr(exc, "value", None)
            reaction = reaction_for(code) if isinstance(code, int) else Reaction.TRANSIENT
            if reaction is Reaction.UNSUPPORTED:
                log.info("GPU %d: %s not supported (%s); not asking again",
                         gpu.index, name, describe(exc))
                gpu.unsupported.add(name)
                return None
            if reaction is Reaction.GPU_DOWN:
                assert isinstance(code, int)
                raise GpuDown(GPU_DOWN_KINDS[code], describe(exc)) from exc
            if reaction is Reaction.FATAL:
                raise NvmlFatal(describe(exc)) from exc
            log.debug("GPU %d: %s failed: %s", gpu.index, name, describe(exc))
            self.count("nvml_call")
            return None

    def read(self, gpu: GpuState, options: CollectOptions) -> GpuReading:
        """Every enabled group of one GPU.

        Raises:
            GpuDown: as ``call``; the partial reading is abandoned.
            NvmlFatal: as ``call``.
        """
        c = self._c
        v: dict[str, Any] = {}
        if options.memory:
            self._memory(gpu, v)
        if options.utilization:
            rates = self.call(gpu, "utilization", c.utilization)
            if rates is not None:
                v["utilization_ratio"] = rates.gpu / 100.0
                v["memory_utilization_ratio"] = rates.memory / 100.0
        if options.temperature:
            temp = self.call(gpu, "temperature_v", c.temperature_v, c.temperature_sensor)
            if temp is None and "temperature_v" in gpu.unsupported:
                temp = self.call(gpu, "temperature", c.temperature, c.temperature_sensor)
            if temp is not None:
                v["temperature_celsius"] = float(temp)
        if options.power:
            usage = self.call(gpu, "power_usage", c.power_usage)
            limit = self.call(gpu, "power_limit", c.power_limit)
            if usage is not None:
                v["power_usage_watts"] = usage / 1000.0
            if limit is not None:
                v["power_limit_watts"] = limit / 1000.0
        if options.clocks:
            self._clocks(gpu, v)
        if options.throttle:
            self._throttle(gpu, v)
        if options.ecc:
            corrected = self.call(gpu, "ecc", c.ecc, c.ecc_corrected, c.ecc_volatile)
            if corrected is not None:
                uncorrected = self.call(gpu, "ecc", c.ecc, c.ecc_uncorrected, c.ecc_volatile)
                if uncorrected is not None:
                    v["ecc"] = EccCounts(corrected=int(corrected), uncorrected=int(uncorrected))
        if options.fan:
            fan = self.call(gpu, "fan", c.fan)
            if fan is not None:
                v["fan_speed_ratio"] = fan / 100.0
        if options.energy:
            energy = self.call(gpu, "energy", c.energy)
            if energy is not None:
                v["energy_joules"] = energy / 1000.0
        if options.pcie:
            rx = self.call(gpu, "pcie", c.pcie, c.pcie_rx)
            tx = self.call(gpu, "pcie", c.pcie, c.pcie_tx)
            if rx is not None:
                v["pcie_rx_bytes_per_second"] = float(rx * _KIB)
            if tx is not None:
                v["pcie_tx_bytes_per_second"] = float(tx * _KIB)
        if options.processes or options.process_utilization:
            self._processes(gpu, v, options.process_utilization)
        return GpuReading(identity=gpu.identity, **v)

    def _memory(self, gpu: GpuState, v: dict[str, Any]) -> None:
        info = self.call(gpu, "memory_v2", self._c.memory_v2)
        if info is not None:
            v["memory_reserved_bytes"] = int(info.reserved)
        elif "memory_v2" in gpu.unsupported:
            info = self.call(gpu, "memory", self._c.memory_v1)
        if info is not None:
            v["memory_used_bytes"] = int(info.used)
            v["memory_free_bytes"] = int(info.free)

    def _clocks(self, gpu: GpuState, v: dict[str, Any]) -> None:
        c = self._c
        sm = self.call(gpu, "clock_sm", c.clock_info, c.clock_sm)
        mem = self.call(gpu, "clock_mem", c.clock_info, c.clock_mem)
        graphics = self.call(gpu, "clock_graphics", c.clock_info, c.clock_graphics)
        if sm is not None:
            v["sm_clock_hertz"] = sm * 1e6
        if mem is not None:
            v["memory_clock_hertz"] = mem * 1e6
        if graphics is not None:
            v["graphics_clock_hertz"] = graphics * 1e6
        pstate = self.call(gpu, "performance_state", c.pstate)
        if pstate is not None and 0 <= pstate <= _MAX_PSTATE:
            v["performance_state"] = int(pstate)

    def _throttle(self, gpu: GpuState, v: dict[str, Any]) -> None:
        mask = self.call(gpu, "clock_event_reasons", self._c.event_reasons)
        if mask is None and "clock_event_reasons" in gpu.unsupported:
            mask = self.call(gpu, "clock_throttle_reasons", self._c.throttle_reasons)
        if mask is None:
            return
        mask = int(mask)
        reasons = self._throttle_cache.get(mask)
        if reasons is None:  # a handful of distinct masks ever occur: build each once
            active = {name: bool(mask & bit) for name, bit in THROTTLE_BITS}
            reasons = ThrottleReasons(active=active)
            self._throttle_cache[mask] = reasons
        v["throttle"] = reasons

    def _processes(self, gpu: GpuState, v: dict[str, Any], with_utilization: bool) -> None:
        c = self._c
        total = gpu.identity.memory_total_bytes
        compute, bad_c = clean_entries(
            self.call(gpu, "processes_compute", c.compute) or (), total)
        graphics, bad_g = clean_entries(
            self.call(gpu, "processes_graphics", c.graphics) or (), total)
        if bad_c or bad_g:
            log.log(logging.DEBUG if gpu.garbled_seen else logging.WARNING,
                    "GPU %d: dropped %d garbled process entries (driver R535.43-535.86?)",
                    gpu.index, bad_c + bad_g)
            gpu.garbled_seen = True
            self.count("garbled_process_entry", bad_c + bad_g)
        utilization: dict[int, float] | None = None
        if with_utilization and (compute or graphics):
            samples = self.call(gpu, "process_utilization", c.process_utilization,
                                gpu.last_seen_timestamp)
            if samples is not None:
                utilization, gpu.last_seen_timestamp, unreadable = newest_samples(
                    samples, gpu.last_seen_timestamp)
                if unreadable:
                    self.count("process_utilization_sample", unreadable)
        v["processes"] = merge_processes(compute, graphics, utilization)
