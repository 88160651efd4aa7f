"""GPU health paths on a real GPU: the XID event waiter, memory-health reads, MIG mode (read-only).

Never changes a GPU mode and never provokes an XID; XID counting is proven against the fake NVML.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group
from exporter.sources.nvml.events import EventWaiter
from exporter.sources.nvml.mig import MigReader
from exporter.sources.nvml.source import NvmlSource

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


def test_remapped_rows_and_lifetime_ecc_read(nvml: ModuleType) -> None:
    source = NvmlSource(hostname="gpu", watch_events=False)
    source.start()
    try:
        snapshot = source.collect(frozenset({Group.REMAPPING, Group.ECC}))
    finally:
        source.close()
    for gpu in snapshot.gpus:
        print(gpu.identity.index, dict(gpu.values))
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu.identity.index)
        corrected, uncorrected, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
        assert gpu.labelled(metrics.REMAPPED_ROWS.name) == {"corrected": corrected,
                                                      "uncorrected": uncorrected}
        assert gpu.value(metrics.REMAP_PENDING.name) == float(bool(pending))
        assert gpu.value(metrics.REMAP_FAILURE.name) == float(bool(failure))
        lifetime = gpu.labelled(metrics.ECC_AGGREGATE.name)
        assert lifetime is not None
        assert lifetime["corrected"] == nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC)


def test_ecc_counts_follow_nvml_over_collections(nvml: ModuleType) -> None:
    # The lifetime counts are reused while the volatile ones stay the same: each collection's
    # counts must still lie between the driver's answers just before and just after it.
    def raw(handle: Any, counter: int) -> dict[str, int]:
        return {"corrected": nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter),
                "uncorrected": nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)}

    source = NvmlSource(hostname="gpu", watch_events=False)
    source.start()
    try:
        for _ in range(20):
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            before = [(raw(h, nvml.NVML_VOLATILE_ECC), raw(h, nvml.NVML_AGGREGATE_ECC))
                      for h in handles]
            snapshot = source.collect(frozenset({Group.ECC}))
            after = [(raw(h, nvml.NVML_VOLATILE_ECC), raw(h, nvml.NVML_AGGREGATE_ECC))
                     for h in handles]
            for gpu, low, high in zip(snapshot.gpus, before, after, strict=True):
                for row, lowest, highest in ((metrics.ECC_ERRORS, low[0], high[0]),
                                             (metrics.ECC_AGGREGATE, low[1], high[1])):
                    found = gpu.labelled(row.name)
                    assert found is not None, row.name
                    assert all(lowest[t] <= found[t] <= highest[t] for t in lowest), (
                        row.name, lowest, found, highest)
            time.sleep(0.05)
    finally:
        source.close()


def test_source_with_the_waiter_exposes_registered_events(nvml: ModuleType) -> None:
    source = NvmlSource(hostname="gpu", event_wait_ms=WAIT_MS)
    source.start()
    try:
        snapshot = source.collect(frozenset({Group.XID, Group.MIG}))
        alive = [t.name for t in threading.enumerate() if t.name.startswith("xid-waiter-")]
    finally:
        began = time.monotonic()
        source.close()
        took = time.monotonic() - began
    print({g.identity.index: dict(g.values) for g in snapshot.gpus}, alive, f"close {took:.3f}s")
    assert all(g.value(metrics.XID_EVENTS_REGISTERED.name) == 1.0 for g in snapshot.gpus)
    assert len(alive) == len(snapshot.gpus)
    assert took < WAIT_MS / 1000 + 0.5
    assert not any(t.name.startswith("xid-waiter-") for t in threading.enumerate())


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
