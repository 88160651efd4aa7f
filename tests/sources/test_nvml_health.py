"""Memory health through the NVML source against the fake NVML: remapped rows, retired pages,
lifetime (aggregate) ECC."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group
from exporter.snapshot import GpuReading
from exporter.sources.nvml import health
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health
from tests.sources.fake_nvml_parts import NVMLError

HEALTH = frozenset({Group.REMAPPING, Group.ECC})


@pytest.fixture
def sources() -> Iterator[list[NvmlSource]]:
    made: list[NvmlSource] = []
    yield made
    for source in made:
        source.close()


def read(fake: FakeHealthNvml, sources: list[NvmlSource]) -> tuple[NvmlSource, GpuReading]:
    source = NvmlSource(hostname="h", nvml=fake, watch_events=False)
    source.start()
    sources.append(source)
    return source, source.collect(HEALTH).gpus[0]


def test_hopper_reports_remaps_and_lifetime_ecc_but_no_retired_pages(
        sources: list[NvmlSource]) -> None:
    fake = FakeHealthNvml([h200_health(0, remapped=(3, 1, 1, 0),
                                       ecc_aggregate={0: 120, 1: 2}, ecc={0: 5, 1: 0})])
    source, gpu = read(fake, sources)
    assert gpu.labelled(metrics.REMAPPED_ROWS.name) == {"corrected": 3, "uncorrected": 1}
    assert gpu.value(metrics.REMAP_PENDING.name) == 1.0
    assert gpu.value(metrics.REMAP_FAILURE.name) == 0.0
    assert gpu.labelled(metrics.ECC_AGGREGATE.name) == {"corrected": 120, "uncorrected": 2}
    assert gpu.labelled(metrics.ECC_ERRORS.name) == {"corrected": 5, "uncorrected": 0}  # volatile
    assert metrics.RETIRED_PAGES.name not in gpu.values  # Hopper: NOT_SUPPORTED
    source.collect(HEALTH)
    assert fake.calls[("nvmlDeviceGetRetiredPages", 0)] == 1  # asked once, then never again
    assert fake.calls[("nvmlDeviceGetRemappedRows", 0)] == 2


def test_pre_ampere_reports_retired_pages_and_no_remaps(sources: list[NvmlSource]) -> None:
    fake = FakeHealthNvml([h200_health(0, name="Tesla V100-SXM2-32GB", remapped=None,
                                       retired_pages={0: [0x1000, 0x2000], 1: [0x3000]},
                                       retired_pending=1)])
    _, gpu = read(fake, sources)
    assert metrics.REMAPPED_ROWS.name not in gpu.values
    assert gpu.labelled(metrics.RETIRED_PAGES.name) == {"single_bit": 2, "double_bit": 1}
    assert gpu.value(metrics.RETIRED_PENDING.name) == 1.0


def test_remap_failure_and_no_ecc_mode(sources: list[NvmlSource]) -> None:
    spec = h200_health(0, remapped=(0, 512, 0, 1))
    spec.unsupported.add("nvmlDeviceGetTotalEccErrors")  # ECC mode off
    _, gpu = read(FakeHealthNvml([spec]), sources)
    assert gpu.value(metrics.REMAP_FAILURE.name) == 1.0
    assert gpu.value(metrics.REMAP_PENDING.name) == 0.0
    assert metrics.ECC_AGGREGATE.name not in gpu.values


def test_mig_enabled_gpu_answers_no_remap_state(sources: list[NvmlSource]) -> None:
    _, gpu = read(FakeHealthNvml([h200_health(0, mig_mode=(1, 1))]), sources)
    assert metrics.REMAPPED_ROWS.name not in gpu.values


def test_lost_gpu_is_down_not_half_read(sources: list[NvmlSource]) -> None:
    fake = FakeHealthNvml([h200_health(0)])
    source, _ = read(fake, sources)
    fake.lose(0)
    gpu = source.collect(HEALTH).gpus[0]
    assert not gpu.up
    assert not gpu.values


def watch_ecc(fake: FakeHealthNvml, monkeypatch: pytest.MonkeyPatch,
              failures: list[int] | None = None) -> list[int]:
    """The counter of every ECC call (0 volatile, 1 aggregate), in order; each code in
    ``failures`` fails one aggregate call (the next ones) with that NVML error."""
    counters: list[int] = []
    real = fake.nvmlDeviceGetTotalEccErrors

    def counted(handle: Any, error_type: int, counter: int) -> int:
        counters.append(counter)
        if counter == fake.NVML_AGGREGATE_ECC and failures:
            raise NVMLError(failures.pop(0))
        return real(handle, error_type, counter)

    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEccErrors", counted)
    return counters


def test_lifetime_ecc_is_read_again_only_when_the_volatile_counts_change(
        sources: list[NvmlSource], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = h200_health(0, ecc={0: 5, 1: 0}, ecc_aggregate={0: 120, 1: 2})
    fake = FakeHealthNvml([spec])
    counters = watch_ecc(fake, monkeypatch)
    source, gpu = read(fake, sources)
    assert counters == [0, 0, 1, 1]
    counters.clear()
    gpu = source.collect(HEALTH).gpus[0]
    assert counters == [0, 0]  # volatile counts unchanged: the lifetime ones too
    assert gpu.labelled(metrics.ECC_ERRORS.name) == {"corrected": 5, "uncorrected": 0}
    assert gpu.labelled(metrics.ECC_AGGREGATE.name) == {"corrected": 120, "uncorrected": 2}
    spec.ecc[0], spec.ecc_aggregate[0] = 6, 121  # a new corrected error counts in both
    counters.clear()
    gpu = source.collect(HEALTH).gpus[0]
    assert counters == [0, 0, 1, 1]
    assert gpu.labelled(metrics.ECC_ERRORS.name) == {"corrected": 6, "uncorrected": 0}
    assert gpu.labelled(metrics.ECC_AGGREGATE.name) == {"corrected": 121, "uncorrected": 2}
    fake.lose(0)
    source.collect(HEALTH)
    fake.recover(0)
    counters.clear()
    source.collect(HEALTH)  # a new handle (the GPU may have been reset): read again
    assert counters == [0, 0, 1, 1]
    monkeypatch.setattr(health, "LIFETIME_ECC_REUSE_SECONDS", 0.0)
    counters.clear()
    source.collect(HEALTH)  # reused for a limited time only
    assert counters == [0, 0, 1, 1]


def test_failed_ecc_reads_are_counted_and_read_again(
        sources: list[NvmlSource], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeHealthNvml([h200_health(0, ecc={0: 5, 1: 0}, ecc_aggregate={0: 120, 1: 2})])
    counters = watch_ecc(fake, monkeypatch, failures=[10])  # NVML_ERROR_TIMEOUT: transient
    source = NvmlSource(hostname="h", nvml=fake, watch_events=False)
    source.start()
    sources.append(source)
    snapshot = source.collect(HEALTH)
    assert snapshot.errors == {"nvml_call": 1}
    assert snapshot.gpus[0].labelled(metrics.ECC_AGGREGATE.name) == {"uncorrected": 2}
    counters.clear()
    snapshot = source.collect(HEALTH)
    assert counters == [0, 0, 1, 1]  # the failed lifetime read is not reused
    assert snapshot.gpus[0].labelled(metrics.ECC_AGGREGATE.name) == {"corrected": 120,
                                                                      "uncorrected": 2}
    fake.fail("nvmlDeviceGetTotalEccErrors", 10, gpu=0, times=1)  # the next volatile read
    counters.clear()
    snapshot = source.collect(HEALTH)
    assert snapshot.errors == {"nvml_call": 1}
    assert snapshot.gpus[0].labelled(metrics.ECC_ERRORS.name) == {"uncorrected": 0}
    assert snapshot.gpus[0].labelled(metrics.ECC_AGGREGATE.name) == {"corrected": 120,
                                                                      "uncorrected": 2}
    assert counters == [0, 0, 1, 1]  # the volatile counts are not known: lifetime read again
    counters.clear()
    source.collect(HEALTH)
    source.collect(HEALTH)
    assert counters == [0, 0, 1, 1, 0, 0]
