"""Fakes for scheduler and app tests: a scripted source, a manual clock, snapshots."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group
from exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from exporter.sources.base import SourceUnavailable


def make_snapshot(serial: int = 0, errors: Mapping[str, int] | None = None, gpus: int = 1,
                  ) -> Snapshot:
    """A one-GPU snapshot; ``serial`` makes successive snapshots distinguishable."""
    readings = tuple(
        GpuReading(
            identity=GpuIdentity(
                index=i, uuid=f"GPU-{i:04d}", name="Fake GPU", pci_bus_id=f"0000:{i:02x}:00.0",
                memory_total_bytes=80 << 30,
            ),
            values={metrics.MEMORY_TOTAL.name: 80 << 30,
                    metrics.MEMORY_USED.name: (serial + 1) << 20,
                    metrics.UTILIZATION.name: 0.5},
        )
        for i in range(gpus)
    )
    return Snapshot(
        source="fake", hostname="host", taken_at=1_000.0 + serial, duration_seconds=0.001,
        gpus=readings, errors=dict(errors or {}),
    )


class FakeClock:
    """A monotonic clock that only moves when told to."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeSource:
    """A source with scripted start failures, optional blocking, and call counters."""

    name = "fake"

    def __init__(self, *, start_failures: int = 0, errors: Mapping[str, int] | None = None,
                 delay: float = 0.0) -> None:
        self.start_failures = start_failures
        self.errors = dict(errors or {})
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()  # cleared = collect() blocks until set (a hung NVML call)
        self.entered = threading.Event()
        self.lose_next = False
        self.raise_next: Exception | None = None
        self.start_calls = 0
        self.collect_calls = 0
        self.closed = False
        self.groups: list[frozenset[Group]] = []

    def start(self) -> None:
        self.start_calls += 1
        if self.start_failures > 0:
            self.start_failures -= 1
            raise SourceUnavailable("NVML library not found")

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        self.collect_calls += 1
        self.groups.append(groups)
        self.entered.set()
        if self.delay:
            time.sleep(self.delay)
        if not self.gate.wait(30):
            raise AssertionError("test left a collection blocked")
        if self.lose_next:
            self.lose_next = False
            raise SourceUnavailable("GPU fell off the bus")
        if self.raise_next is not None:
            exc, self.raise_next = self.raise_next, None
            raise exc
        return make_snapshot(self.collect_calls, self.errors)

    def close(self) -> None:
        self.closed = True
