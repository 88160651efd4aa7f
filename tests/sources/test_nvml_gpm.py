"""GPM through the NVML source, against the fake NVML: windows, units, status, backoff, MIG."""

from __future__ import annotations

import itertools
import logging
import math

import pytest

from exporter.catalogue.metrics import SWITCHABLE_GROUPS, Group, default_groups
from exporter.snapshot import GpuReading, Snapshot
from exporter.sources.nvml.gpm import MAX_WINDOW_SECONDS, RETRY_SECONDS
from exporter.sources.nvml.source import NvmlSource
from exporter.state import ExporterState, ExpositionOptions
from tests.exposition.parse import collect_text, series, value
from tests.sources.fake_nvml import FakeNvml, h200
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health, mig_device

DEFAULT = default_groups()
GiB = 1 << 30
#: An fp16 matrix product as the H200 reported it over 1 s (percent; PCIe in MiB/s).
FP16 = {1: 99.8, 2: 96.3, 3: 14.2, 4: 1.3, 5: 93.4, 7: 93.4, 10: 16.8, 20: 4.3, 21: 12.9}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(fake: FakeNvml) -> tuple[NvmlSource, Clock]:
    source = NvmlSource(hostname="node-1", nvml=fake, watch_events=False)
    source.start()
    clock = Clock()
    assert source._calls is not None
    source._calls.gpm._clock = clock  # windows are measured on this clock
    return source, clock


def collect(source: NvmlSource, clock: Clock, seconds: float = 15.0,
            groups: frozenset[Group] = DEFAULT) -> list[GpuReading]:
    clock.now += seconds
    return list(source.collect(groups).gpus)


def status(reading: GpuReading) -> str:
    found = reading.labelled("gpu_exporter_gpm_status")
    assert found is not None
    assert len(found) == 1
    return next(iter(found))


def test_first_collection_opens_the_window_and_the_second_reports_it() -> None:
    fake = FakeNvml([h200(0, gpm=dict(FP16))])
    source, clock = started(fake)
    first = collect(source, clock)[0]
    assert status(first) == "ok"
    assert first.value("gpu_sm_active_ratio") is None  # no window yet: no value, not 0
    second = collect(source, clock)[0]
    assert second.value("gpu_sm_active_ratio") == 0.963
    assert second.value("gpu_sm_occupancy_ratio") == 0.142
    assert second.value("gpu_tensor_active_ratio") == 0.934
    assert second.value("gpu_dram_active_ratio") == 0.168
    assert second.labelled("gpu_tensor_pipe_active_ratio") == {
        "hmma": 0.934, "imma": 0.0, "dfma": 0.0, "dmma": 0.0}
    assert second.labelled("gpu_pipe_active_ratio") == {
        "fp64": 0.0, "fp32": 0.0, "fp16": 0.0, "integer": 0.013}
    assert second.labelled("gpu_pcie_traffic_bytes_per_second") == {
        "rx": round(12.9 * 2**20), "tx": round(4.3 * 2**20)}
    # the graphics-engine metric costs ~1.5 ms: only with its opt-in group
    assert second.value("gpu_graphics_engine_active_ratio") is None
    assert "gpu_nvlink_traffic_bytes_per_second" not in second.values  # no links
    assert fake.calls[("nvmlGpmQueryDeviceSupport", 0)] == 1
    assert fake.calls[("nvmlGpmSampleGet", 0)] == 2
    assert len(fake.samples_allocated) == 2  # two buffers per GPU, reused
    source.close()
    assert all(sample.freed for sample in fake.samples_allocated)


def test_opt_in_engine_and_nvlink_where_the_gpu_has_links() -> None:
    fake = FakeNvml([h200(0, gpm={1: 99.0, 60: 100.0, 61: 50.0}, nvlink=True), h200(1)])
    source, clock = started(fake)
    groups = DEFAULT | {Group.GPM_ENGINE}
    collect(source, clock, groups=groups)
    linked, plain = collect(source, clock, groups=groups)
    assert linked.value("gpu_graphics_engine_active_ratio") == 0.99
    assert linked.labelled("gpu_nvlink_traffic_bytes_per_second") == {
        "rx": 100 * 2**20, "tx": 50 * 2**20}
    assert "gpu_nvlink_traffic_bytes_per_second" not in plain.values
    assert plain.value("gpu_sm_active_ratio") == 0.0


def test_groups_off_cost_no_gpm_call() -> None:
    fake = FakeNvml([h200(0, gpm=dict(FP16))])
    source, clock = started(fake)
    for _ in range(3):
        reading = collect(source, clock, groups=DEFAULT - {Group.GPM})[0]
        assert "gpu_exporter_gpm_status" not in reading.values
    assert not [call for call in fake.calls if call[0].startswith("nvmlGpm")]


def test_gpu_without_gpm_is_asked_once_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([h200(0, gpm_supported=False, name="NVIDIA A100-SXM4-80GB"),
                     h200(1, gpm=dict(FP16))])
    source, clock = started(fake)
    with caplog.at_level(logging.INFO, logger="exporter.sources.nvml.gpm"):
        for _ in range(5):
            old, hopper = collect(source, clock)
    assert status(old) == "not_supported"
    assert old.value("gpu_sm_active_ratio") is None
    assert hopper.value("gpu_sm_active_ratio") == 0.963  # one GPU's lack hides nothing
    assert fake.calls[("nvmlGpmQueryDeviceSupport", 0)] == 1
    assert fake.calls[("nvmlGpmSampleGet", 0)] == 0
    lines = [r.getMessage() for r in caplog.records if "GPU 0" in r.getMessage()]
    assert len(lines) == 1
    assert "no GPM" in lines[0]


def test_binding_without_gpm_functions() -> None:
    fake = FakeNvml([h200(0)])
    fake.old_binding("nvmlGpmSampleGet")
    source, clock = started(fake)
    for _ in range(3):
        reading = collect(source, clock)[0]
    assert status(reading) == "binding_too_old"
    assert reading.value("gpu_temperature_celsius") is not None  # nothing else degraded
    assert fake.calls[("nvmlGpmQueryDeviceSupport", 0)] == 0


@pytest.mark.parametrize(("code", "expected"), [(4, "no_permission"), (19, "in_use"),
                                                (10, "error")])
def test_refused_sample_backs_off_and_recovers(code: int, expected: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([h200(0, gpm=dict(FP16))])
    source, clock = started(fake)
    collect(source, clock)
    fake.fail("nvmlGpmSampleGet", code)
    with caplog.at_level(logging.INFO, logger="exporter.sources.nvml.gpm"):
        snapshot = source.collect(DEFAULT)
        refused = snapshot.gpus[0]
        assert status(refused) == expected
        assert snapshot.errors.get("gpm") == 1
        calls = fake.calls[("nvmlGpmSampleGet", 0)]
        for _ in range(10):  # within the backoff: not asked again, however often scraped
            reading = collect(source, clock, seconds=RETRY_SECONDS / 20)[0]
            assert status(reading) == expected
            assert reading.value("gpu_sm_active_ratio") is None
            assert reading.value("gpu_temperature_celsius") is not None
        assert fake.calls[("nvmlGpmSampleGet", 0)] == calls
        fake._rules.clear()
        reopened = collect(source, clock, seconds=RETRY_SECONDS)[0]
        assert status(reopened) == "ok"
        assert reopened.value("gpu_sm_active_ratio") is None  # a new window opens first
        assert collect(source, clock)[0].value("gpu_sm_active_ratio") == 0.963
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2  # one line on the way down, one on the way back
    assert "refused" in messages[0]
    assert "read again" in messages[1]


def test_backoff_doubles_while_the_sample_keeps_failing() -> None:
    fake = FakeNvml([h200(0)])
    source, clock = started(fake)
    fake.fail("nvmlGpmSampleGet", 10)
    asked_at = []
    for _ in range(400):  # 400 collections 15 s apart: 100 minutes
        before = fake.calls[("nvmlGpmSampleGet", 0)]
        collect(source, clock)
        if fake.calls[("nvmlGpmSampleGet", 0)] > before:
            asked_at.append(clock.now)
    gaps = [later - earlier for earlier, later in itertools.pairwise(asked_at)]
    # asked again after 60 s, 120, 240, 480, then every 900 s: not once per scrape
    assert gaps == [60, 120, 240, 480, 900, 900, 900, 900, 900]


def test_long_gap_opens_a_new_window_instead_of_averaging_over_it() -> None:
    fake = FakeNvml([h200(0, gpm=dict(FP16))])
    source, clock = started(fake)
    collect(source, clock)
    assert collect(source, clock, seconds=MAX_WINDOW_SECONDS + 1)[0].value(
        "gpu_sm_active_ratio") is None
    assert collect(source, clock)[0].value("gpu_sm_active_ratio") == 0.963


def test_one_metric_unsupported_and_odd_values_leave_only_those_out() -> None:
    fake = FakeNvml([h200(0, gpm={2: 100.4, 3: math.nan, 5: -1.0, 10: 50.0},
                          gpm_unsupported={9})])
    source, clock = started(fake)
    collect(source, clock)
    reading = collect(source, clock)[0]
    assert reading.value("gpu_sm_active_ratio") == 1.0  # a percentage overshooting 100
    assert reading.value("gpu_sm_occupancy_ratio") is None  # NaN
    assert reading.value("gpu_tensor_active_ratio") is None  # negative
    assert reading.value("gpu_dram_active_ratio") == 0.5
    pipes = reading.labelled("gpu_tensor_pipe_active_ratio")
    assert pipes is not None
    assert "imma" not in pipes
    assert "hmma" in pipes
    assert status(reading) == "ok"


def test_lost_gpu_during_gpm_then_a_new_handle_opens_a_new_window() -> None:
    fake = FakeNvml([h200(0, gpm=dict(FP16)), h200(1, gpm=dict(FP16))])
    source, clock = started(fake)
    collect(source, clock)
    fake.fail("nvmlGpmSampleGet", 15, gpu=0, times=1)  # GPU_IS_LOST
    lost, other = collect(source, clock)
    assert not lost.up
    assert other.value("gpu_sm_active_ratio") == 0.963
    back = collect(source, clock)[0]
    assert back.up
    assert back.value("gpu_sm_active_ratio") is None  # samples of the old handle are void
    assert collect(source, clock)[0].value("gpu_sm_active_ratio") == 0.963
    assert fake.calls[("nvmlGpmQueryDeviceSupport", 0)] == 2  # asked again on the new handle


def test_mig_instances_are_read_per_gpu_instance() -> None:
    devices = {
        0: mig_device(0, gi=7, ci=0, profile="1g.18gb", memory_total=17 * GiB),
        1: mig_device(0, gi=2, ci=0, profile="3g.71gb", memory_total=70 * GiB),
        2: mig_device(0, gi=2, ci=1, profile="3g.71gb", memory_total=70 * GiB),
    }
    fake = FakeHealthNvml([h200_health(0, mig_mode=(1, 1), mig_devices=devices,
                                       gpm_instances={7: {2: 10.0}, 2: {2: 80.0, 5: 60.0}})])
    source = NvmlSource(hostname="node-1", nvml=fake, watch_events=False)
    source.start()
    clock = Clock()
    assert source._calls is not None
    source._calls.gpm._clock = clock
    collect(source, clock)
    reading = collect(source, clock)[0]
    assert reading.value("gpu_sm_active_ratio") is None  # no GPU-wide read under MIG
    assert status(reading) == "ok"
    assert reading.mig is not None
    activity = {(d.gpu_instance, d.compute_instance): d.activity.get("gpu_sm_active_ratio")
                for d in reading.mig}
    assert activity == {(2, 0): 0.8, (2, 1): 0.8, (7, 0): 0.1}
    assert fake.calls[("nvmlGpmMigSampleGet", 0)] == 4  # once per GPU instance, not per CI
    snapshot = Snapshot(source="nvml", hostname="h", taken_at=0.0, duration_seconds=0.0,
                        gpus=(reading,))
    text = collect_text(ExporterState(snapshot, 0.0, False, None),
                        ExpositionOptions(groups=frozenset(SWITCHABLE_GROUPS)))
    by_instance = {s["gpu_instance"]: s for s in series(text, "gpu_mig_sm_active_ratio")}
    assert set(by_instance) == {"2", "7"}  # once per GPU instance
    assert by_instance["7"]["gpu_profile"] == "1g.18gb"
    assert value(text, "gpu_mig_sm_active_ratio", gpu_instance="2") == 0.8
    assert value(text, "gpu_mig_tensor_active_ratio", gpu_instance="2") == 0.6
    source.close()
