"""The per-GPU reads that are genuinely special (rows with ``NvmlSpecial``).

Each reader returns ``{metric name: value}`` for the rows it fills and runs once per GPU read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from exporter.catalogue.metrics import (
    HEALTH_EVENT_COUNT,
    HEALTH_EVENTS,
    MEMORY_FREE,
    MEMORY_RESERVED,
    MEMORY_TOTAL,
    MEMORY_USED,
    MIG_ENABLED,
    THROTTLE_ACTIVE,
    THROTTLE_REASONS,
    XID_EVENTS_REGISTERED,
    Value,
)
from exporter.sources.nvml.device import FieldCalls, GpuState
from exporter.sources.nvml.health import read_ecc, read_remapped_rows, read_retired_pages

#: Clock event reason bits from nvml.h, in ``THROTTLE_REASONS`` order.
REASON_BITS: Final = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)
THROTTLE_BITS: Final = tuple(zip(THROTTLE_REASONS, REASON_BITS, strict=True))


def read_memory(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """Memory info v2 (with the driver's reserve), else v1 once v2 is found unsupported.

    The total is the identity's (read once at start-up).
    """
    values: dict[str, Value] = {MEMORY_TOTAL.name: gpu.identity.memory_total_bytes}
    info = reader.call(gpu, "memory_v2", reader.binding.memory_v2)
    if info is not None:
        values[MEMORY_RESERVED.name] = int(info.reserved)
    elif "memory_v2" in gpu.unsupported:
        info = reader.call(gpu, "memory", reader.binding.function("nvmlDeviceGetMemoryInfo"))
    if info is not None:
        values[MEMORY_USED.name] = int(info.used)
        values[MEMORY_FREE.name] = int(info.free)
    return values


def read_throttle(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """The clock event reasons bitmask (older drivers: the throttle reasons one) as 1/0."""
    mask = reader.call_newest(gpu, ("nvmlDeviceGetCurrentClocksEventReasons",
                                    "nvmlDeviceGetCurrentClocksThrottleReasons"))
    if mask is None:
        return {}
    mask = int(mask)
    reasons = reader.throttle_cache.get(mask)
    if reasons is None:  # a handful of distinct masks ever occur: build each once
        reasons = {name: 1.0 if mask & bit else 0.0 for name, bit in THROTTLE_BITS}
        reader.throttle_cache[mask] = reasons
    return {THROTTLE_ACTIVE.name: reasons}


def read_events(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """From the XID waiter's counts (not an NVML call): registered or not, and health events
    by type (0 for every watched type without events yet, so the first one shows in
    ``increase()``). Absent when the waiter is not running."""
    found = None if reader.events is None else reader.events.gpus.get(gpu.index)
    if found is None:
        return {}
    values: dict[str, Value] = {XID_EVENTS_REGISTERED.name: float(found.registered)}
    watched = [event for event in HEALTH_EVENTS if event in found.watched]
    if watched:
        values[HEALTH_EVENT_COUNT.name] = {e: float(found.events.get(e, 0)) for e in watched}
    return values


def read_mig_mode(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """Whether MIG is on (asked once per handle; absent on GPUs without MIG)."""
    if reader.mig is None:
        return {}
    enabled = reader.mig.enabled(gpu.index, gpu.handle, reader.errors)
    return {} if enabled is None else {MIG_ENABLED.name: float(enabled)}


SPECIAL_READERS: dict[str, Callable[[FieldCalls, GpuState], dict[str, Value]]] = {
    "memory": read_memory,
    "throttle": read_throttle,
    "remapped_rows": read_remapped_rows,
    "retired_pages": read_retired_pages,
    "ecc": read_ecc,
    "events": read_events,
    "mig": read_mig_mode,
}
