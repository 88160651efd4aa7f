"""GPU health paths on a real GPU: the XID event waiter, memory-health reads, MIG mode (read-only).

Never changes a GPU mode and never provokes an XID; XID counting is proven against the fake NVML.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

import pytest

from exporter.sources.nvml.events import EventWaiter
from exporter.sources.nvml.health import HealthCalls, MemoryHealth, read_memory_health
from exporter.sources.nvml.mig import MigReader

pytestmark = pytest.mark.gpu
WAIT_MS = 300


@pytest.fixture
def nvml() -> Any:
    import pynvml  # noqa: PLC0415 - only collected where NVML works (see conftest)

    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def test_waiter_registers_xid_on_every_gpu_and_stops_within_one_timeout(nvml: ModuleType) -> None:
    waiter = EventWaiter(nvml, wait_ms=WAIT_MS)
    waiter.start()
    try:
        time.sleep(3 * WAIT_MS / 1000)  # several timeouts: the threads must survive them
        counts = waiter.counts()
        print({i: (g.registered, g.watched, g.error) for i, g in counts.gpus.items()})
        assert len(counts.gpus) == nvml.nvmlDeviceGetCount()
        assert all(g.registered and g.error is None for g in counts.gpus.values())
        alive = [t for t in threading.enumerate() if t.name.startswith("xid-waiter-")]
        assert len(alive) == len(counts.gpus)
    finally:
        took = waiter.stop()
    print(f"stop took {took * 1e3:.0f} ms")
    assert took < WAIT_MS / 1000 + 0.3
    assert not any(t.name.startswith("xid-waiter-") for t in threading.enumerate())
    nvml.nvmlDeviceGetCount()  # our own NVML reference still works after the waiter's shutdown


def _health(nvml: ModuleType, index: int) -> MemoryHealth:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def call(name: str, fn: Any, *args: Any) -> Any:
        try:
            return None if fn is None else fn(handle, *args)
        except nvml.NVMLError_NotSupported:
            return None

    return read_memory_health(call, HealthCalls(nvml))


def test_remapped_rows_and_lifetime_ecc_read(nvml: ModuleType) -> None:
    for index in range(nvml.nvmlDeviceGetCount()):
        health = _health(nvml, index)
        print(index, health)
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        assert health.remapped_rows is not None
        rows = nvml.nvmlDeviceGetRemappedRows(handle)
        assert (health.remapped_rows.corrected, health.remapped_rows.uncorrected) == rows[:2]
        assert health.ecc_lifetime is not None
        assert health.ecc_lifetime.corrected == nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC)


def test_mig_reader_agrees_with_the_mig_mode(nvml: ModuleType) -> None:
    reader = MigReader(nvml)
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            current = nvml.nvmlDeviceGetMigMode(handle)[0]
        except nvml.NVMLError_NotSupported:
            current = 0
        errors: dict[str, int] = {}
        devices = reader.read(index, handle, errors, None)
        print(index, current, devices)
        assert (devices is not None) == (current == 1)
        assert errors == {}
