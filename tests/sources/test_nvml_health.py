"""Memory health reads against the fake NVML: remapped rows, retired pages, lifetime ECC."""

from __future__ import annotations

import functools

import pytest

from exporter.snapshot import EccCounts
from exporter.sources.nvml_errors import GpuDown
from exporter.sources.nvml_fields import GpuReader, GpuState, NvmlCalls, placeholder_identity
from exporter.sources.nvml_health import (
    HealthCalls,
    MemoryHealth,
    RemappedRows,
    RetiredPages,
    read_memory_health,
)
from tests.sources.fake_nvml_health import FakeHealthGpu, FakeHealthNvml, h200_health


def reader_for(fake: FakeHealthNvml, index: int = 0) -> tuple[GpuReader, GpuState]:
    fake.nvmlInit()
    gpu = GpuState(index=index, identity=placeholder_identity(index),
                   handle=fake.nvmlDeviceGetHandleByIndex(index))
    return GpuReader(NvmlCalls(fake), {}, {}), gpu


def health(fake: FakeHealthNvml, reader: GpuReader, gpu: GpuState) -> MemoryHealth:
    return read_memory_health(functools.partial(reader.call, gpu), HealthCalls(fake))


def test_hopper_reports_remaps_and_lifetime_ecc_but_no_retired_pages() -> None:
    fake = FakeHealthNvml([h200_health(0, remapped=(3, 1, 1, 0),
                                       ecc_aggregate={0: 120, 1: 2}, ecc={0: 5, 1: 0})])
    reader, gpu = reader_for(fake)
    result = health(fake, reader, gpu)
    assert result.remapped_rows == RemappedRows(corrected=3, uncorrected=1, pending=True,
                                                failure=False)
    assert result.retired_pages is None  # Hopper: NOT_SUPPORTED
    assert result.ecc_lifetime == EccCounts(corrected=120, uncorrected=2)
    # Asked once: not supported fields are not asked for again.
    health(fake, reader, gpu)
    assert fake.calls[("nvmlDeviceGetRetiredPages", 0)] == 1
    assert fake.calls[("nvmlDeviceGetRemappedRows", 0)] == 2
    assert reader.errors == {}


def test_pre_ampere_reports_retired_pages_and_no_remaps() -> None:
    gpu_spec = h200_health(0, name="Tesla V100-SXM2-32GB", remapped=None,
                           retired_pages={0: [0x1000, 0x2000], 1: [0x3000]}, retired_pending=1)
    fake = FakeHealthNvml([gpu_spec])
    reader, gpu = reader_for(fake)
    result = health(fake, reader, gpu)
    assert result.remapped_rows is None
    assert result.retired_pages == RetiredPages(single_bit=2, double_bit=1, pending=True)


def test_remap_failure_and_no_ecc_mode() -> None:
    spec: FakeHealthGpu = h200_health(0, remapped=(0, 512, 0, 1))
    spec.unsupported.add("nvmlDeviceGetTotalEccErrors")  # ECC mode off
    fake = FakeHealthNvml([spec])
    reader, gpu = reader_for(fake)
    result = health(fake, reader, gpu)
    assert result.remapped_rows is not None
    assert result.remapped_rows.failure
    assert not result.remapped_rows.pending
    assert result.ecc_lifetime is None


def test_mig_enabled_gpu_answers_no_remap_state() -> None:
    fake = FakeHealthNvml([h200_health(0, mig_mode=(1, 1))])
    reader, gpu = reader_for(fake)
    assert health(fake, reader, gpu).remapped_rows is None


def test_lost_gpu_abandons_the_read() -> None:
    fake = FakeHealthNvml([h200_health(0)])
    reader, gpu = reader_for(fake)
    fake.lose(0)
    with pytest.raises(GpuDown):
        health(fake, reader, gpu)
