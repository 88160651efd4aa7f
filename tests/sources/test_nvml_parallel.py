"""NVML source: GPUs read concurrently, one hung GPU isolated, recovery without restart."""

from __future__ import annotations

import threading
import time

from exporter.catalogue.metrics import ENERGY, MEMORY_USED, Group, default_groups
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml import FakeNvml, FakeProcess, FakeSample, h200
from tests.sources.slow_nvml import SlowNvml

HUNG = "nvmlDeviceGetUtilizationRates"


def reader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.endswith("-reader")}


def busy_fake(gpus: int) -> FakeNvml:
    fake = FakeNvml([h200(i) for i in range(gpus)])
    for i, gpu in enumerate(fake.gpus):
        gpu.compute = [FakeProcess(pid=100 + i, used_memory=1 << 30)]
        gpu.samples = [FakeSample(pid=100 + i, timestamp=10, sm=50 + i)]
    return fake


def test_slow_calls_of_different_gpus_overlap() -> None:
    nvml = SlowNvml(busy_fake(8))
    source = NvmlSource(hostname="test", nvml=nvml)
    source.start()
    snap = source.collect(default_groups() | {Group.ENERGY})
    assert nvml.max_in_flight >= 2  # per-process utilisation / energy calls ran at once
    assert [g.processes[0].sm_utilization_ratio for g in snap.gpus] == [
        (50 + i) / 100 for i in range(8)]
    assert all(g.up and g.value(ENERGY.name) is not None for g in snap.gpus)
    assert snap.errors == {}
    source.close()


def test_one_gpu_is_read_without_reader_threads() -> None:
    source = NvmlSource(hostname="test", nvml=busy_fake(1))
    source.start()
    before = reader_threads()
    assert source.collect(default_groups()).gpus[0].up
    assert reader_threads() <= before  # none started
    source.close()


def test_a_hung_gpu_is_down_alone_and_recovers_without_restart() -> None:
    fake = busy_fake(3)
    # A timeout long enough that "answered at once" (< half of it) holds on a loaded machine.
    source = NvmlSource(hostname="test", nvml=fake, gpu_timeout=1.0)
    source.start()
    source.collect(default_groups())
    calls_before = fake.calls[(HUNG, 1)]
    entered = fake.hang(HUNG, gpu=1)
    try:
        fake.gpus[0].memory_used = fake.gpus[2].memory_used = 5 << 30
        begin = time.monotonic()
        first = source.collect(default_groups())
        assert entered.is_set()
        assert 0.95 <= time.monotonic() - begin < 10  # about gpu_timeout
        up = [g.up for g in first.gpus]
        assert up == [True, False, True]
        assert [g.value(MEMORY_USED.name) for g in first.gpus] == [5 << 30, None, 5 << 30]  # fresh
        assert "has not returned for" in (first.gpus[1].error or "")
        assert first.errors == {"gpu_timeout": 1}
        threads = reader_threads()

        for _ in range(5):  # answered at once; no call queued behind the hung one
            begin = time.monotonic()
            again = source.collect(default_groups())
            assert time.monotonic() - begin < 0.5
            assert [g.up for g in again.gpus] == [True, False, True]
            assert again.errors == {}  # the hang is counted once
        assert fake.calls[(HUNG, 1)] == calls_before + 1
        assert reader_threads() == threads
        assert source.hung_gpus().keys() == {1}

        source.close()  # NVML must not be shut down under a running call
        assert fake.shutdown_count == 0
        source.start()  # a new start leaves the stuck thread alone
    finally:
        fake.release()
    deadline = time.monotonic() + 5
    while source.hung_gpus() and time.monotonic() < deadline:
        time.sleep(0.01)
    recovered = source.collect(default_groups())
    assert [g.up for g in recovered.gpus] == [True, True, True]
    assert recovered.errors == {}
    source.close()
    assert fake.shutdown_count == 1


def test_one_unparsable_utilisation_sample_never_marks_the_gpu_down() -> None:
    fake = busy_fake(2)
    fake.gpus[0].compute.append(FakeProcess(pid=200, used_memory=1 << 30))
    odd = [FakeSample(pid=None, timestamp=11, sm=5),  # type: ignore[arg-type]
           FakeSample(pid="abc", timestamp=11, sm=5),  # type: ignore[arg-type]
           FakeSample(pid=200, timestamp=12, sm=None)]  # type: ignore[arg-type]
    fake.gpus[0].samples = [*odd, FakeSample(pid=100, timestamp=13, sm=70)]
    source = NvmlSource(hostname="test", nvml=fake)
    source.start()
    snap = source.collect(default_groups())
    gpu = snap.gpus[0]
    assert gpu.up
    ratios = {p.pid: p.sm_utilization_ratio for p in gpu.processes}
    assert ratios == {100: 0.7, 200: 0.0}  # the readable sample counts, odd ones are skipped
    assert snap.errors == {"process_utilization_sample": 3}
    assert snap.gpus[1].up
    source.close()
