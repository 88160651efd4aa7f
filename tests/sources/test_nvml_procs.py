"""Process lists and per-process utilisation of NvmlSource, against the fake NVML."""

from __future__ import annotations

import logging
import threading
import time
import types

import pytest

from exporter.catalogue.metrics import Group, default_groups
from exporter.catalogue.metrics.process import LAST_ACTIVE
from exporter.snapshot import GpuProcess, ProcessType
from exporter.sources.nvml.processes import PID_MAX_LIMIT, clean_entries, newest_samples
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml import FakeNvml, FakeProcess, FakeSample, h200

GIB = 1 << 30


def collect(
    fake: FakeNvml, source: NvmlSource | None = None
) -> tuple[NvmlSource, dict[int, GpuProcess], dict[str, int]]:
    if source is None:
        source = NvmlSource(hostname="h", nvml=fake)
        source.start()
    snap = source.collect(default_groups())
    return source, {p.pid: p for p in snap.gpus[0].processes}, dict(snap.errors)


def test_compute_and_graphics_lists_merge_by_pid() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, 6 * GIB), FakeProcess(20, 3 * GIB)]
    fake.gpus[0].graphics = [FakeProcess(20, 3 * GIB), FakeProcess(30, GIB)]
    _, procs, errors = collect(fake)
    assert sorted(procs) == [10, 20, 30]
    assert procs[10].type is ProcessType.COMPUTE
    assert procs[20].type is ProcessType.COMPUTE_GRAPHICS
    assert procs[30].type is ProcessType.GRAPHICS
    assert procs[20].used_memory_bytes == 3 * GIB
    assert procs[10].owner is None  # enrichment fills owners, not the source
    assert errors == {}


def test_memory_not_available_is_none() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, None)]
    _, procs, _ = collect(fake)
    assert procs[10].used_memory_bytes is None


def test_idle_gpu_has_no_processes_and_skips_process_utilization() -> None:
    fake = FakeNvml([h200(0)])
    source, procs, _ = collect(fake)
    assert procs == {}
    assert fake.calls[("nvmlDeviceGetProcessUtilization", 0)] == 0
    assert source.collect(default_groups()).gpus[0].processes == ()


@pytest.mark.parametrize(
    "bad",
    [
        FakeProcess(0, GIB),
        FakeProcess(-1, GIB),
        FakeProcess(PID_MAX_LIMIT + 1, GIB),
        FakeProcess(11, 200 * GIB),  # more than the device has
        FakeProcess(11, GIB, gpu_instance_id=123_456),
        types.SimpleNamespace(pid="x", usedGpuMemory=1),
    ],
)
def test_garbled_entries_are_dropped_and_counted(bad: object) -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, GIB), bad]
    _, procs, errors = collect(fake)
    assert sorted(procs) == [10]
    assert errors == {"garbled_process_entry": 1}


def test_conflicting_duplicates_dropped_exact_duplicates_folded() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, GIB), FakeProcess(10, 2 * GIB),
                            FakeProcess(20, GIB), FakeProcess(20, GIB)]
    _, procs, errors = collect(fake)
    assert sorted(procs) == [20]
    assert errors == {"garbled_process_entry": 2}


def test_r535_shuffled_struct_entries_are_caught() -> None:
    fake = FakeNvml([h200(0, r535_layout=True)])
    fake.gpus[0].compute = [FakeProcess(1000 + i, (i + 1) * GIB) for i in range(4)]
    _, procs, errors = collect(fake)
    # The first entry is read correctly; the shifted ones (pid 0, pid 2**32-1, ...) are dropped.
    assert sorted(procs) == [1000]
    assert procs[1000].used_memory_bytes == GIB
    assert errors == {"garbled_process_entry": 3}


def test_v1_process_symbols_used_on_very_old_drivers() -> None:
    fake = FakeNvml([h200(0)])
    fake.old_driver("nvmlDeviceGetComputeRunningProcesses_v3",
                    "nvmlDeviceGetComputeRunningProcesses_v2")
    fake.gpus[0].compute = [FakeProcess(10, GIB), FakeProcess(11, None)]
    source, procs, errors = collect(fake)
    assert procs[10].used_memory_bytes == GIB
    assert procs[11].used_memory_bytes is None
    assert errors == {}
    assert source.process_list_functions()["compute"] == (
        "nvmlDeviceGetComputeRunningProcesses (v1)")
    _, again, _ = collect(fake, source)
    assert sorted(again) == [10, 11]
    assert fake.calls[("nvmlDeviceGetComputeRunningProcesses_v2", 0)] == 1  # probed once


def test_no_process_list_call_at_all_leaves_processes_empty() -> None:
    fake = FakeNvml([h200(0)])
    fake.old_driver(*(f"nvmlDeviceGet{k}RunningProcesses{v}" for k in ("Compute", "Graphics")
                      for v in ("_v3", "_v2", "")))
    fake.gpus[0].compute = [FakeProcess(10, GIB)]
    source, procs, errors = collect(fake)
    assert procs == {}
    assert errors == {}
    assert source.process_list_functions() == {"compute": None, "graphics": None}
    assert "processes_compute" in source.unsupported_fields()[0]


def test_process_utilization_newest_sample_clamped_and_timestamp_carried() -> None:
    fake = FakeNvml([h200(0)])
    g = fake.gpus[0]
    g.compute = [FakeProcess(10, GIB), FakeProcess(20, GIB), FakeProcess(30, GIB)]
    g.samples = [FakeSample(10, 100, 20), FakeSample(10, 300, 90), FakeSample(10, 200, 50),
                 FakeSample(20, 250, 170), FakeSample(99, 260, 40)]  # 99 is not listed
    source, procs, _ = collect(fake)
    assert procs[10].sm_utilization_ratio == 0.9  # newest sample wins
    assert procs[20].sm_utilization_ratio == 1.0  # clamped to 100 %
    assert procs[30].sm_utilization_ratio == 0.0  # listed, no sample: idle
    assert 99 not in procs
    g.samples.append(FakeSample(20, 400, 30))
    _, procs, _ = collect(fake, source)
    assert g.utilization_queries == [0, 300]  # last seen timestamp passed on
    assert procs[20].sm_utilization_ratio == 0.3
    assert procs[10].sm_utilization_ratio == 0.0
    _, procs, errors = collect(fake, source)  # NOT_FOUND: no new samples at all
    assert g.utilization_queries[-1] == 400
    assert {p.sm_utilization_ratio for p in procs.values()} == {0.0}
    assert errors == {}


def test_process_utilization_unsupported_leaves_ratio_none() -> None:
    fake = FakeNvml([h200(0, unsupported={"nvmlDeviceGetProcessUtilization"})])
    fake.gpus[0].compute = [FakeProcess(10, GIB)]
    source, procs, _ = collect(fake)
    assert procs[10].sm_utilization_ratio is None
    collect(fake, source)
    assert fake.calls[("nvmlDeviceGetProcessUtilization", 0)] == 1


def test_process_utilization_disabled_is_not_called() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, GIB)]
    source = NvmlSource(nvml=fake)
    source.start()
    snap = source.collect(default_groups() - {Group.PROCESS_UTILIZATION})
    assert snap.gpus[0].processes[0].sm_utilization_ratio is None
    assert fake.calls[("nvmlDeviceGetProcessUtilization", 0)] == 0


def test_process_list_lost_gpu_marks_gpu_down() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    fake.gpus[1].compute = [FakeProcess(10, GIB)]
    fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", 15, gpu=0, times=1)
    source = NvmlSource(nvml=fake)
    source.start()
    snap = source.collect(default_groups())
    assert not snap.gpus[0].up
    assert [p.pid for p in snap.gpus[1].processes] == [10]


def test_clean_entries_without_known_total_checks_sign_only() -> None:
    entries = [types.SimpleNamespace(pid=5, usedGpuMemory=10**15),
               types.SimpleNamespace(pid=6, usedGpuMemory=-1)]
    kept, garbled = clean_entries(entries, memory_total=0)
    assert kept == {5: 10**15}
    assert garbled == 1


def test_newest_samples_keeps_last_seen_when_empty() -> None:
    ratios, last, unreadable = newest_samples([], 1234)
    assert unreadable == 0
    assert ratios == {}
    assert last == 1234


def test_fake_hang_blocks_until_released() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    source = NvmlSource(nvml=fake)
    source.start()
    entered = fake.hang("nvmlDeviceGetMemoryInfo", gpu=1)  # covers the _v2 symbol
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(source.collect(default_groups())))
    worker.start()
    assert entered.wait(timeout=5)
    worker.join(timeout=0.2)
    assert worker.is_alive()  # blocked inside the NVML call
    assert result == []
    fake.release()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert len(result) == 1
    assert fake.calls[("nvmlDeviceGetMemoryInfo_v2", 0)] == 1  # GPU 0 not blocked


def test_garbled_entries_warn_once_per_gpu(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, GIB), FakeProcess(0, GIB)]
    source = None
    with caplog.at_level(logging.DEBUG, logger="exporter.sources"):
        for _ in range(4):
            source, _, errors = collect(fake, source)
            assert errors == {"garbled_process_entry": 1}  # counted every time
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1  # logged loudly once


def test_graphics_only_process() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].graphics = [FakeProcess(77, 512 << 20)]
    _, procs, _ = collect(fake)
    assert procs[77].type is ProcessType.GRAPHICS
    assert procs[77].used_memory_bytes == 512 << 20


def test_last_active_is_the_newest_busy_sample_and_survives_idle_collections() -> None:
    now = time.time()
    fake = FakeNvml([h200(0)])
    g = fake.gpus[0]
    g.compute = [FakeProcess(10, GIB), FakeProcess(20, GIB)]
    us = 1_000_000
    g.samples = [FakeSample(10, int((now - 30) * us), 80), FakeSample(10, int((now - 5) * us), 0),
                 FakeSample(20, int((now - 2) * us), 0)]
    source, procs, _ = collect(fake)
    assert procs[10].values[LAST_ACTIVE] == pytest.approx(now - 30)
    assert LAST_ACTIVE not in procs[20].values  # only idle samples: unknown
    _, procs, _ = collect(fake, source)  # no new samples: the time is kept
    assert procs[10].values[LAST_ACTIVE] == pytest.approx(now - 30)
    g.samples.append(FakeSample(20, int((now - 1) * us), 40))
    _, procs, _ = collect(fake, source)
    assert procs[20].values[LAST_ACTIVE] == pytest.approx(now - 1)
    # A restarted exporter asks with timestamp 0 and recovers what NVML still holds.
    restarted, procs, _ = collect(fake)
    assert g.utilization_queries[-1] == 0
    assert procs[10].values[LAST_ACTIVE] == pytest.approx(now - 30)
    g.compute = [FakeProcess(20, GIB)]  # pid 10 exits: forgotten
    _, procs, _ = collect(fake, restarted)
    g.compute = [FakeProcess(10, GIB), FakeProcess(20, GIB)]  # a new process reuses pid 10
    g.samples = [s for s in g.samples if s.pid != 10]
    _, procs, _ = collect(fake, restarted)
    assert LAST_ACTIVE not in procs[10].values


def test_last_active_not_read_without_process_utilization() -> None:
    fake = FakeNvml([h200(0)])
    fake.gpus[0].compute = [FakeProcess(10, GIB)]
    fake.gpus[0].samples = [FakeSample(10, int(time.time() * 1_000_000), 50)]
    source = NvmlSource(nvml=fake)
    source.start()
    snap = source.collect(default_groups() - {Group.PROCESS_UTILIZATION})
    assert snap.gpus[0].processes[0].values == {}
