"""The per-GPU reads that are genuinely special (rows with ``NvmlSpecial``).

Each reader returns ``{metric name: value}`` for the rows it fills and runs once per GPU read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from exporter.metrics import (
    MEMORY_FREE,
    MEMORY_RESERVED,
    MEMORY_TOTAL,
    MEMORY_USED,
    THROTTLE_ACTIVE,
    THROTTLE_REASONS,
)
from exporter.snapshot import Value

if TYPE_CHECKING:
    from exporter.sources.nvml.reader import GpuReader, GpuState

#: Clock event reason bits from nvml.h, in ``THROTTLE_REASONS`` order.
REASON_BITS: Final = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)
THROTTLE_BITS: Final = tuple(zip(THROTTLE_REASONS, REASON_BITS, strict=True))


def read_memory(reader: GpuReader, gpu: GpuState) -> dict[str, Value]:
    """Memory info v2 (with the driver's reserve), else v1 once v2 is found unsupported.

    The total is the identity's (read once at start-up).
    """
    nvml = reader.calls.nvml
    version = getattr(nvml, "nvmlMemory_v2", None)
    memory = reader.calls.function("nvmlDeviceGetMemoryInfo")
    values: dict[str, Value] = {MEMORY_TOTAL.name: gpu.identity.memory_total_bytes}
    v2 = None if version is None or memory is None else functools.partial(memory, version=version)
    info = reader.call(gpu, "memory_v2", v2)
    if info is not None:
        values[MEMORY_RESERVED.name] = int(info.reserved)
    elif "memory_v2" in gpu.unsupported:
        info = reader.call(gpu, "memory", memory)
    if info is not None:
        values[MEMORY_USED.name] = int(info.used)
        values[MEMORY_FREE.name] = int(info.free)
    return values


def read_throttle(reader: GpuReader, gpu: GpuState) -> dict[str, Value]:
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


SPECIAL_READERS: dict[str, Callable[[GpuReader, GpuState], dict[str, Value]]] = {
    "memory": read_memory,
    "throttle": read_throttle,
}
