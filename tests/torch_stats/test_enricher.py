"""TorchEnricher (published figures -> GpuProcess.values by pid and GPU uuid) and the allocator
rows in /metrics and the JSON model."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter.attribution.torchstats import TorchEnricher, TorchStatsReader
from exporter.catalogue.metrics import PROCESS_MEMORY, Group, default_groups
from exporter.catalogue.metrics import allocator as a
from exporter.exposition.json_model import process_model
from exporter.snapshot import Snapshot
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import collect_text, series, value
from tests.fixtures.fakeproc import write_boot
from tests.torch_stats.test_reader import HOST_NS, host_process, write_file

GIB = 1 << 30
UUID = [factory.identity(i).uuid for i in range(2)]


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    write_boot(root)
    (root / "1" / "ns").mkdir(parents=True)
    (root / "1" / "ns" / "pid").symlink_to(f"pid:[{HOST_NS}]")
    return root


def _device(uuid: str, allocated: int, reserved: int, **more: int) -> dict[str, Any]:
    return {"uuid": uuid, "allocated_bytes": allocated, "reserved_bytes": reserved, **more}


def _nvml_snapshot() -> Snapshot:
    """pid 77 on GPUs 0 and 1 (publishes for both), pid 88 on GPU 0 (publishes nothing)."""
    gpu0 = factory.reading(0, (factory.process(77, 10 * GIB), factory.process(88, 3 * GIB)))
    gpu1 = factory.reading(1, (factory.process(77, 5 * GIB),))
    return replace(factory.snapshot(gpu0, gpu1), source="nvml")


def _enricher(directory: Path, procfs: Path) -> TorchEnricher:
    return TorchEnricher(TorchStatsReader(str(directory), procfs=str(procfs)))


def test_figures_land_on_the_process_of_the_right_gpu(tmp_path: Path, procfs: Path) -> None:
    write_file(tmp_path, 77, 5000, devices=[
        _device(UUID[1], 3 * GIB, 4 * GIB, ooms=2),
        _device(UUID[0], 8 * GIB, 9 * GIB, alloc_retries=5, inactive_split_bytes=1 << 20),
    ])
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    host_process(procfs, 88, uid=os.getuid(), start_ticks=5000)
    before = _nvml_snapshot()
    after = _enricher(tmp_path, procfs).enrich(before)
    p77, p88 = after.gpus[0].processes
    assert p77.values[a.TORCH_ALLOCATED.name] == 8 * GIB
    assert p77.values[a.TORCH_RESERVED.name] == 9 * GIB
    assert p77.values[a.TORCH_ALLOC_RETRIES.name] == 5
    assert a.TORCH_OOMS.name not in p77.values  # not published for that device: left out
    assert p88 is before.gpus[0].processes[1]  # no publisher: the very same object
    on_gpu1 = after.gpus[1].processes[0]
    assert (on_gpu1.values[a.TORCH_ALLOCATED.name], on_gpu1.values[a.TORCH_OOMS.name]) == (
        3 * GIB, 2)
    assert after.errors == before.errors


def test_rows_read_the_values_and_derive_the_driver_overhead(
    tmp_path: Path, procfs: Path
) -> None:
    write_file(tmp_path, 77, 5000, devices=[_device(UUID[0], 8 * GIB, 9 * GIB),
                                            _device(UUID[1], 3 * GIB, 6 * GIB)])
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    snap = _enricher(tmp_path, procfs).enrich(_nvml_snapshot())
    groups = default_groups() | {Group.TORCH, Group.EXPORTER}
    text = collect_text(factory.state(snap), ExpositionOptions(groups=groups))
    assert value(text, a.TORCH_ALLOCATED.name, gpu="0", pid="77") == 8 * GIB
    assert value(text, a.TORCH_DRIVER_OVERHEAD.name, gpu="0", pid="77") == 1 * GIB  # 10 - 9
    # GPU 1: NVML 5 GiB but 6 GiB reserved (sampled at another moment): no overhead series.
    assert value(text, a.TORCH_RESERVED.name, gpu="1", pid="77") == 6 * GIB
    assert value(text, a.TORCH_DRIVER_OVERHEAD.name, gpu="1", pid="77") is None
    # pid 88 has no publisher: its process series as before, no allocator series.
    assert value(text, PROCESS_MEMORY.name, pid="88") == 3 * GIB
    assert not [s for row in a.TORCH_ROWS for s in series(text, row.name) if s["pid"] == "88"]
    # Without the group: no allocator series at all.
    plain = collect_text(factory.state(snap), ExpositionOptions(groups=default_groups()))
    assert not [row.name for row in a.TORCH_ROWS if series(plain, row.name)]
    # The JSON model carries the figures on the process.
    process = process_model(snap.gpus[0].processes[0], groups)
    assert process.torch_allocated_bytes == 8 * GIB
    assert process.torch_driver_overhead_bytes == 1 * GIB


def test_merged_series_sum_the_figures(tmp_path: Path, procfs: Path) -> None:
    """Without the pid label, processes sharing the other labels are one series: the allocator
    figures add up like the memory does."""
    gpu0 = factory.reading(0, (factory.process(77, 10 * GIB), factory.process(78, 4 * GIB)))
    snap = replace(factory.snapshot(gpu0), source="nvml")
    for pid, allocated in ((77, 8 * GIB), (78, 2 * GIB)):
        write_file(tmp_path, pid, 5000, devices=[_device(UUID[0], allocated, allocated)])
        host_process(procfs, pid, uid=os.getuid(), start_ticks=5000)
    snap = _enricher(tmp_path, procfs).enrich(snap)
    options = ExpositionOptions(groups=default_groups() | {Group.TORCH}, pid_label=False)
    text = collect_text(factory.state(snap), options)
    assert value(text, a.TORCH_ALLOCATED.name, gpu="0") == 10 * GIB
    assert value(text, a.TORCH_DRIVER_OVERHEAD.name, gpu="0") == 4 * GIB


def test_simulated_snapshots_are_left_alone(tmp_path: Path, procfs: Path) -> None:
    write_file(tmp_path, 77, 5000, devices=[_device(UUID[0], 1, 1)])
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    snap = replace(_nvml_snapshot(), source="simulated")
    assert _enricher(tmp_path, procfs).enrich(snap) is snap


def test_rejected_files_are_counted_in_the_snapshot_errors(
    tmp_path: Path, procfs: Path
) -> None:
    (tmp_path / f"77-5000-{HOST_NS}.json").write_text("{not json")
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    enricher = _enricher(tmp_path, procfs)
    first = enricher.enrich(_nvml_snapshot())
    assert first.errors["torch_stats_file"] == 1
    assert "torch_stats_file" not in enricher.enrich(_nvml_snapshot()).errors  # counted once


def test_unreadable_directory_is_logged_once(
    tmp_path: Path, procfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    enricher = _enricher(tmp_path / "missing", procfs)
    snap = _nvml_snapshot()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert enricher.enrich(snap) is snap
    assert len([r for r in caplog.records if "torch statistics directory" in r.message]) == 1
