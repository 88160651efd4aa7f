"""Memory health through the NVML source against the fake NVML: remapped rows, retired pages,
lifetime (aggregate) ECC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter import metrics
from exporter.metrics import Group
from exporter.snapshot import GpuReading
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health

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
