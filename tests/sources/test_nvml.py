"""NvmlSource against the fake NVML: start/close, identity, field groups, errors, recovery."""

from __future__ import annotations

import logging

import pytest

from exporter.catalogue.metrics import (
    SWITCHABLE_GROUPS,
    THROTTLE_REASONS,
    UNKNOWN_VALUE,
    Group,
    default_groups,
)
from exporter.snapshot import GpuReading
from exporter.sources.base import SourceUnavailable
from exporter.sources.nvml.source import NvmlSource, cuda_version_text, shuffles_process_structs
from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200, missing_pynvml

ALL = frozenset(SWITCHABLE_GROUPS)
NONE: frozenset[Group] = frozenset()


def started(fake: FakeNvml) -> NvmlSource:
    source = NvmlSource(hostname="node-1", nvml=fake)
    source.start()
    return source


def gpu(source: NvmlSource, index: int, groups: frozenset[Group] = ALL) -> GpuReading:
    return source.collect(groups).gpus[index]


def test_start_reads_identity_and_system_versions_once() -> None:
    fake = FakeNvml([h200(0), h200(1, serial="", memory_total=80 << 30)], cuda=12040)
    source = started(fake)
    source.start()  # idempotent: no second init
    snap = source.collect(NONE)
    source.collect(NONE)
    assert fake.init_count == 1
    assert fake.calls[("nvmlDeviceGetUUID", 0)] == 1  # static data read once, not per collect
    assert (snap.source, snap.hostname) == ("nvml", "node-1")
    assert (snap.driver_version, snap.cuda_driver_version) == ("580.159.04", "12.4")
    assert snap.nvml_version == "13.580.159.04"
    first, second = (g.identity for g in snap.gpus)
    assert first.uuid == fake.gpus[0].uuid
    assert first.name == "NVIDIA H200"
    assert first.pci_bus_id == "00000000:19:00.0"
    assert second.pci_bus_id == "00000000:1A:00.0"
    assert (first.serial, second.serial) == ("1650924000001", None)
    assert second.memory_total_bytes == 80 << 30
    assert first.vbios_version == "96.00.99.00.01"
    assert first.power_limit_default_watts == 700.0


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(13000) == "13.0"
    assert cuda_version_text(11080) == "11.8"


def test_every_group_converted_to_base_units() -> None:
    fake = FakeNvml([h200(0, memory_used=10 << 30, memory_reserved=512 << 20, util_gpu=42,
                          util_memory=7, temperature=67, power_mw=312_500, power_limit_mw=650_000,
                          clocks_mhz={0: 1980, 1: 1975, 2: 3201}, pstate=2, reasons_mask=0x24,
                          ecc={0: 5, 1: 1}, energy_mj=9_000_500, pcie_rx_kbs=10, pcie_tx_kbs=3,
                          unsupported=set())])
    g = gpu(started(fake), 0)
    total = fake.gpus[0].memory_total
    assert g.up
    assert g.error is None
    assert g.value("gpu_memory_used_bytes") == 10 << 30
    assert g.value("gpu_memory_reserved_bytes") == 512 << 20
    assert g.value("gpu_memory_free_bytes") == total - (10 << 30) - (512 << 20)
    assert g.value("gpu_utilization_ratio") == 0.42
    assert g.value("gpu_memory_utilization_ratio") == 0.07
    assert g.value("gpu_temperature_celsius") == 67.0
    assert (g.value("gpu_power_usage_watts"), g.value("gpu_power_limit_watts")) == (312.5, 650.0)
    clocks = ("gpu_sm_clock_hertz", "gpu_memory_clock_hertz", "gpu_graphics_clock_hertz")
    assert [g.value(name) for name in clocks] == [1975e6, 3201e6, 1980e6]
    assert g.value("gpu_performance_state") == 2
    assert g.labelled("gpu_throttle_reason_active") is not None
    assert set(g.labelled("gpu_throttle_reason_active")) == set(THROTTLE_REASONS)
    active = {name for name, on in g.labelled("gpu_throttle_reason_active").items() if on}
    assert active == {"sw_power_cap", "sw_thermal_slowdown"}
    assert g.labelled("gpu_ecc_errors_total") is not None
    assert g.labelled("gpu_ecc_errors_total") == {"corrected": 5, "uncorrected": 1}
    assert g.value("gpu_fan_speed_ratio") == 0.4
    assert g.value("gpu_energy_consumed_joules_total") == 9000.5
    assert g.labelled("gpu_pcie_throughput_bytes_per_second") == {"rx": 10240.0, "tx": 3072.0}


def test_opt_in_groups_are_not_read_by_default() -> None:
    fake = FakeNvml([h200(0)])
    g = gpu(started(fake), 0, default_groups())
    assert g.value("gpu_energy_consumed_joules_total") is None
    assert g.labelled("gpu_pcie_throughput_bytes_per_second") is None
    assert fake.calls[("nvmlDeviceGetTotalEnergyConsumption", 0)] == 0
    assert fake.calls[("nvmlDeviceGetPcieThroughput", 0)] == 0


def test_disabled_groups_make_no_calls() -> None:
    fake = FakeNvml([h200(0)])
    g = gpu(started(fake), 0, NONE)
    assert g.up
    assert g.value("gpu_memory_used_bytes") is None
    assert g.value("gpu_temperature_celsius") is None
    device_calls = {name for (name, idx), n in fake.calls.items() if idx == 0 and n}
    assert device_calls == {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID",
                            "nvmlDeviceGetName", "nvmlDeviceGetPciInfo_v3",
                            "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetSerial",
                            "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetMinorNumber",
                            "nvmlDeviceGetPowerManagementDefaultLimit"}


def test_not_supported_is_asked_once_then_cached_per_gpu() -> None:
    fake = FakeNvml([h200(0), h200(1, unsupported=set())])
    source = started(fake)
    for _ in range(3):
        snap = source.collect(default_groups())
    assert snap.gpus[0].value("gpu_fan_speed_ratio") is None
    assert snap.gpus[1].value("gpu_fan_speed_ratio") == 0.4
    assert fake.calls[("nvmlDeviceGetFanSpeed", 0)] == 1
    assert fake.calls[("nvmlDeviceGetFanSpeed", 1)] == 3
    assert snap.errors == {}
    assert source.unsupported_fields() == {0: frozenset({"nvmlDeviceGetFanSpeed"}), 1: frozenset()}


def test_rows_sharing_a_struct_share_one_call_per_read() -> None:
    fake = FakeNvml([h200(0)])
    source = started(fake)
    for _ in range(3):
        reading = gpu(source, 0, default_groups())
    assert reading.value("gpu_utilization_ratio") is not None
    assert reading.value("gpu_memory_utilization_ratio") is not None
    assert fake.calls[("nvmlDeviceGetUtilizationRates", 0)] == 3


def test_unsupported_ecc_leaves_ecc_none() -> None:
    fake = FakeNvml([h200(0, unsupported={"nvmlDeviceGetTotalEccErrors"})])
    source = started(fake)
    assert gpu(source, 0).labelled("gpu_ecc_errors_total") is None
    assert gpu(source, 0).labelled("gpu_ecc_errors_total") is None
    assert fake.calls[("nvmlDeviceGetTotalEccErrors", 0)] == 1


def test_old_driver_falls_back_and_probes_once() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    fake.old_driver()  # no memory v2, TemperatureV, ClocksEventReasons, *_v3 process lists
    fake.gpus[0].compute = [FakeProcess(pid=321, used_memory=1 << 30)]
    source = started(fake)
    source.collect(default_groups())
    probes = sum(fake.calls[("nvmlDeviceGetComputeRunningProcesses_v3", i)] for i in (0, 1))
    snap = source.collect(default_groups())
    g = snap.gpus[0]
    assert g.value("gpu_memory_reserved_bytes") is None  # reserved exists only in v2
    # v1 "used" includes the driver reserve
    used = fake.gpus[0].memory_used + fake.gpus[0].memory_reserved
    assert g.value("gpu_memory_used_bytes") == used
    assert g.value("gpu_temperature_celsius") == 31.0
    assert g.labelled("gpu_throttle_reason_active") is not None
    assert g.labelled("gpu_throttle_reason_active")["gpu_idle"]
    assert [p.pid for p in g.processes] == [321]
    assert source.process_list_functions() == {
        "compute": "nvmlDeviceGetComputeRunningProcesses_v2",
        "graphics": "nvmlDeviceGetGraphicsRunningProcesses_v2"}
    assert fake.calls[("nvmlDeviceGetMemoryInfo_v2", 0)] == 1
    assert fake.calls[("nvmlDeviceGetTemperatureV", 0)] == 1
    assert fake.calls[("nvmlDeviceGetCurrentClocksEventReasons", 1)] == 1
    # The process-list variant is probed for the whole driver: GPUs read concurrently may both
    # try the missing one in the first collection, never again afterwards.
    assert 1 <= probes <= 2
    assert sum(fake.calls[("nvmlDeviceGetComputeRunningProcesses_v3", i)] for i in (0, 1)) == (
        probes)
    assert snap.errors == {}


def test_old_binding_without_functions_uses_older_calls() -> None:
    fake = FakeNvml([h200(0)])
    fake.old_binding("nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons")
    g = gpu(started(fake), 0)
    assert g.value("gpu_temperature_celsius") == 31.0
    assert g.labelled("gpu_throttle_reason_active") is not None
    assert fake.calls[("nvmlDeviceGetTemperature", 0)] == 1


def test_other_error_on_one_field_counts_nvml_call_and_keeps_asking() -> None:
    fake = FakeNvml([h200(0)])
    fake.fail("nvmlDeviceGetPowerUsage", fake.NVML_ERROR_TIMEOUT, gpu=0, times=1)
    source = started(fake)
    snap = source.collect(default_groups())
    assert snap.gpus[0].up
    assert snap.gpus[0].value("gpu_power_usage_watts") is None
    assert snap.gpus[0].value("gpu_power_limit_watts") == 700.0
    assert snap.errors == {"nvml_call": 1}
    again = source.collect(default_groups())
    assert again.gpus[0].value("gpu_power_usage_watts") == 75.123
    assert again.errors == {}


@pytest.mark.parametrize(
    ("code", "kind"),
    [(15, "gpu_lost"), (16, "gpu_reset_required"), (999, "gpu_unknown_error")],
)
def test_gpu_down_codes_mark_only_that_gpu(code: int, kind: str) -> None:
    fake = FakeNvml([h200(0), h200(1)])
    fake.fail("nvmlDeviceGetUtilizationRates", code, gpu=1, times=1)
    source = started(fake)
    snap = source.collect(default_groups())
    lost, healthy = snap.gpus[1], snap.gpus[0]
    assert not lost.up
    assert lost.error
    assert str(code) in lost.error
    assert lost.value("gpu_memory_used_bytes") is None
    assert lost.processes == ()
    assert lost.identity.uuid == fake.gpus[1].uuid
    assert healthy.up
    assert healthy.value("gpu_memory_used_bytes") is not None
    assert snap.errors == {kind: 1}
    back = source.collect(default_groups())  # handle re-acquired, GPU answers again
    assert back.gpus[1].up
    assert back.errors == {}
    assert fake.calls[("nvmlDeviceGetHandleByIndex_v2", 1)] == 2


def test_lost_gpu_stays_down_until_it_recovers() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    source = started(fake)
    fake.lose(0)
    for _ in range(2):
        snap = source.collect(default_groups())
        assert not snap.gpus[0].up
        assert snap.gpus[1].up
        assert snap.errors == {"gpu_lost": 1}
    fake.recover(0)
    snap = source.collect(default_groups())
    assert snap.gpus[0].up
    assert snap.gpus[0].value("gpu_temperature_celsius") == 31.0
    assert snap.gpus[0].identity.uuid == fake.gpus[0].uuid


def test_handle_refused_for_one_index_others_fine_and_retried() -> None:
    fake = FakeNvml([h200(0, handle_error=4), h200(1)])  # NO_PERMISSION on GPU 0
    source = started(fake)
    snap = source.collect(default_groups())
    bad, good = snap.gpus
    assert not bad.up
    assert bad.error is not None
    assert "permission" in bad.error.lower()
    assert "GPU 0" in bad.error
    assert bad.identity.index == 0
    assert bad.identity.uuid == UNKNOWN_VALUE
    assert good.up
    assert good.identity.uuid == fake.gpus[1].uuid
    assert snap.errors == {"gpu_open_failed": 1}
    fake.gpus[0].handle_error = None
    snap = source.collect(default_groups())
    assert snap.gpus[0].up
    assert snap.gpus[0].identity.uuid == fake.gpus[0].uuid


def test_missing_library_is_source_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    missing_pynvml(monkeypatch)
    with pytest.raises(SourceUnavailable, match="NVML library not found"):
        NvmlSource().start()


def test_libnvidia_ml_missing_is_source_unavailable() -> None:
    fake = FakeNvml([h200(0)])
    fake.fail_init(12, times=None)
    with pytest.raises(SourceUnavailable, match="NVML library not found"):
        started(fake)


def test_default_import_uses_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([h200(0)])
    fake.install(monkeypatch)
    source = NvmlSource(hostname="h")
    source.start()
    assert source.collect(default_groups()).gpus[0].identity.uuid == fake.gpus[0].uuid


def test_init_failure_then_recovery() -> None:
    fake = FakeNvml([h200(0)])
    fake.fail_init(9, times=1)  # DRIVER_NOT_LOADED
    source = NvmlSource(nvml=fake)
    with pytest.raises(SourceUnavailable, match=r"NVML init failed: .*9"):
        source.start()
    assert not source.started
    with pytest.raises(SourceUnavailable, match="not started"):
        source.collect(default_groups())
    source.start()
    assert source.collect(default_groups()).gpus[0].up


def test_device_count_failure_is_source_unavailable_and_shuts_down() -> None:
    fake = FakeNvml([h200(0)])
    fake.fail("nvmlDeviceGetCount_v2", 999, times=1)
    with pytest.raises(SourceUnavailable, match="count GPUs"):
        started(fake)
    assert fake.shutdown_count == 1
    assert not fake.initialized


@pytest.mark.parametrize("code", [1, 9, 18])  # UNINITIALIZED, DRIVER_NOT_LOADED, RM mismatch
def test_whole_library_broken_raises_for_reinit(code: int) -> None:
    fake = FakeNvml([h200(0), h200(1)])
    source = started(fake)
    fake.break_library(code)
    with pytest.raises(SourceUnavailable, match="stopped working"):
        source.collect(default_groups())
    assert not source.started
    fake.fix_library()
    source.start()
    assert all(g.up for g in source.collect(default_groups()).gpus)
    assert fake.init_count == 2


def test_fatal_code_on_one_gpu_only_marks_that_gpu() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    fake.fail("nvmlDeviceGetPowerUsage", 18, gpu=0, times=1)
    snap = started(fake).collect(default_groups())
    assert not snap.gpus[0].up
    assert snap.gpus[1].up
    assert snap.errors == {"nvml_unavailable": 1}


def test_unexpected_exception_marks_gpu_down_not_the_collection() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    source = started(fake)
    fake.gpus[0].memory_used = None  # type: ignore[assignment]  # an odd answer
    snap = source.collect(default_groups())
    assert not snap.gpus[0].up
    assert "unexpected" in (snap.gpus[0].error or "")
    assert snap.gpus[1].up
    assert snap.errors == {"nvml_unexpected": 1}


def test_close_shuts_down_and_start_again_rereads() -> None:
    fake = FakeNvml([h200(0)])
    source = started(fake)
    source.close()
    source.close()  # idempotent
    assert fake.shutdown_count == 1
    assert not source.started
    with pytest.raises(SourceUnavailable):
        source.collect(default_groups())
    fake.gpus.append(h200(1))
    source.start()
    assert len(source.collect(default_groups()).gpus) == 2
    assert fake.init_count == 2


def test_collection_timing_fields() -> None:
    fake = FakeNvml([h200(0)])
    snap = started(fake).collect(default_groups())
    assert snap.taken_at > 1.6e9
    assert 0 <= snap.duration_seconds < 1.0


def test_unexpected_exception_while_opening_a_gpu_does_not_fail_start() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    fake.gpus[1].memory_used = None  # type: ignore[assignment]
    snap = started(fake).collect(NONE)
    assert snap.gpus[0].up
    assert not snap.gpus[1].up
    assert "cannot open GPU 1" in (snap.gpus[1].error or "")


@pytest.mark.parametrize(
    ("driver", "shuffled"),
    [("535.43.02", True), ("535.86.10", True), ("535.104.05", False), ("535.42", False),
     ("580.159.04", False), ("garbage", False), (None, False)],
)
def test_r535_driver_range(driver: str | None, shuffled: bool) -> None:
    assert shuffles_process_structs(driver) is shuffled


def test_r535_driver_warns_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="exporter.sources.nvml.source"):
        started(FakeNvml([h200(0)], driver="535.54.03"))
    assert any("garbled process lists" in r.getMessage() for r in caplog.records)


def test_binding_that_is_not_nvidia_ml_py_is_source_unavailable() -> None:
    fake = FakeNvml([h200(0)])
    fake.old_binding("nvmlDeviceGetMemoryInfo")
    with pytest.raises(SourceUnavailable, match="not nvidia-ml-py"):
        started(fake)
    assert not fake.initialized


def test_lost_gpu_warns_once_and_logs_recovery(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([h200(0)])
    source = started(fake)
    fake.lose(0)
    with caplog.at_level(logging.DEBUG, logger="exporter.sources"):
        for _ in range(4):
            source.collect(default_groups())
        fake.recover(0)
        source.collect(default_groups())
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "GPU 0 down" in warnings[0].getMessage()
    assert any("answers again" in r.getMessage() for r in caplog.records)
