"""Field-value rows (throttle time, NVLink) through the NVML source, against the fake NVML:
one call per GPU and collection, fallbacks, absence (never 0) where the GPU does not answer,
and the field ids against nvml.h."""

from __future__ import annotations

import pynvml
import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, NvmlFields, default_groups
from exporter.catalogue.metrics.nvlink import LINK_COUNT
from exporter.snapshot import GpuReading
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml import FakeNvml, h200
from tests.sources.fake_nvml_fields import H100_THROTTLE_NS

THROTTLE = default_groups() | {Group.THROTTLE_TIME}
NVLINK = default_groups() | {Group.NVLINK}
BOTH = THROTTLE | NVLINK
TIME = metrics.THROTTLE_TIME.name
NOT_SUPPORTED, INVALID_ARGUMENT, TIMEOUT = 3, 2, 10


def _read(fake: FakeNvml, groups: frozenset[Group], times: int = 1) -> list[GpuReading]:
    source = NvmlSource(hostname="h", nvml=fake, watch_events=False)
    source.start()
    try:
        readings: list[GpuReading] = []
        for _ in range(times):
            readings = list(source.collect(groups).gpus)
        return readings
    finally:
        source.close()


def test_every_throttle_reason_from_one_call_per_gpu_and_collection() -> None:
    fake = FakeNvml([h200(0), h200(1)])
    readings = _read(fake, THROTTLE, times=3)
    expected = {read.label: H100_THROTTLE_NS[read.fields[0].id] / 1e9
                for read in metrics.THROTTLE_TIME_READS}
    for reading in readings:
        assert reading.labelled(TIME) == expected
    assert expected["sw_power_cap"] == 28.1
    assert expected["low_utilization"] == 23.75
    assert fake.calls[("nvmlDeviceGetFieldValues", 0)] == 3  # one per collection
    assert fake.calls[("nvmlDeviceGetViolationStatus", 0)] == 0
    assert len(fake.field_requests[0][1]) == len(metrics.THROTTLE_TIME_READS)


def test_off_by_default_and_not_asked_then() -> None:
    fake = FakeNvml([h200(0)])
    reading = _read(fake, default_groups())[0]
    assert TIME not in reading.values
    assert fake.calls[("nvmlDeviceGetFieldValues", 0)] == 0


def test_a_reason_without_its_field_uses_its_policy_or_is_absent_never_zero() -> None:
    gpu = h200(0, field_errors={(74, 0): NOT_SUPPORTED, (269, 0): NOT_SUPPORTED,
                                (78, 0): NOT_SUPPORTED},
               violations={0: 5_000_000_000})  # NVML_PERF_POLICY_POWER only
    fake = FakeNvml([gpu])
    readings = _read(fake, THROTTLE, times=3)
    found = readings[0].labelled(TIME)
    assert found is not None
    assert found["sw_power_cap"] == 5.0  # from nvmlDeviceGetViolationStatus
    assert "sw_thermal_slowdown" not in found  # no field, no policy: absent
    assert "low_utilization" not in found  # its policy is unsupported too
    assert found["hw_thermal_slowdown"] == 0.0  # answered 0: present
    # Refused fields are asked once: later requests leave them out.
    assert (74, 0) in fake.field_requests[0][1]
    assert all((74, 0) not in asked and (269, 0) not in asked
               for _, asked in fake.field_requests[1:])
    assert fake.calls[("nvmlDeviceGetViolationStatus", 0)] == 3 + 1  # power x3, low util once


def test_a_binding_without_field_values_reads_the_policies() -> None:
    fake = FakeNvml([h200(0, violations={0: 7_000_000_000, 1: 0, 4: 1_500_000_000})])
    fake.old_binding("nvmlDeviceGetFieldValues")
    found = _read(fake, THROTTLE, times=2)[0].labelled(TIME)
    assert found == {"sw_power_cap": 7.0, "thermal": 0.0, "low_utilization": 1.5}


def test_a_transient_answer_is_counted_and_asked_again() -> None:
    fake = FakeNvml([h200(0, field_errors={(76, 0): TIMEOUT})])
    source = NvmlSource(hostname="h", nvml=fake, watch_events=False)
    source.start()
    try:
        snapshot = source.collect(THROTTLE)
        assert "sync_boost" not in (snapshot.gpus[0].labelled(TIME) or {})
        assert snapshot.errors.get("nvml_call") == 1
        fake.gpus[0].field_errors.clear()
        assert source.collect(THROTTLE).gpus[0].labelled(TIME)["sync_boost"] == 0.0  # type: ignore[index]
    finally:
        source.close()


def test_nvlink_rows_for_the_links_the_gpu_has() -> None:
    gpu = h200(0, nvlink=True, nvlink_links=4,
               fields={(163, 2): 17, (161, 2): 3, (162, 1): 1, (41, 0): 5}, field_errors={})
    gpu.fields[(165, 3)] = 0  # link 3 down
    fake = FakeNvml([gpu])
    readings = _read(fake, NVLINK, times=3)
    reading = readings[0]
    links = {"0", "1", "2", "3"}
    assert reading.labelled(metrics.NVLINK_CRC_FLIT_ERRORS.name) == {
        link: (17.0 if link == "2" else 0.0) for link in links}
    assert reading.labelled(metrics.NVLINK_REPLAY_ERRORS.name) == {
        link: (3.0 if link == "2" else 0.0) for link in links}
    assert reading.labelled(metrics.NVLINK_RECOVERY_ERRORS.name) == {
        link: (1.0 if link == "1" else 0.0) for link in links}
    assert reading.labelled(metrics.NVLINK_CRC_DATA_ERRORS.name) == {
        link: (5.0 if link == "2" else 0.0) for link in links}
    assert reading.labelled(metrics.NVLINK_STATE.name) == {
        link: (0.0 if link == "3" else 1.0) for link in links}
    assert TIME not in reading.values  # its group is off
    # The link count is asked once; the main call asks 5 fields a link (after the first,
    # which tries both per-link forms of the errors: the scoped one answered).
    assert [asked for _, asked in fake.field_requests].count([(LINK_COUNT.id, 0)]) == 1
    main = [asked for _, asked in fake.field_requests if asked != [(LINK_COUNT.id, 0)]]
    assert len(main) == 3
    assert len(main[1]) == len(main[2]) == 5 * 4
    assert all(scope < 4 for asked in main for _, scope in asked)


def test_links_before_hopper_answer_their_per_link_fields() -> None:
    """Volta/Ampere: the scoped DL fields are unknown, the L<n> fields answer."""
    scoped = {(field, link): INVALID_ARGUMENT for field in (161, 162, 163) for link in range(2)}
    legacy = {(32, 0): 9, (33, 0): 0, (46, 0): 2, (47, 0): 0, (53, 0): 0, (54, 0): 4}
    gpu = h200(0, nvlink=True, nvlink_links=2, field_errors=scoped, fields=legacy)
    reading = _read(FakeNvml([gpu]), NVLINK, times=2)[0]
    assert reading.labelled(metrics.NVLINK_CRC_FLIT_ERRORS.name) == {"0": 9.0, "1": 0.0}
    assert reading.labelled(metrics.NVLINK_REPLAY_ERRORS.name) == {"0": 2.0, "1": 0.0}
    assert reading.labelled(metrics.NVLINK_RECOVERY_ERRORS.name) == {"0": 0.0, "1": 4.0}


def test_a_gpu_without_nvlink_has_no_nvlink_series_and_is_asked_once() -> None:
    fake = FakeNvml([h200(0)])  # link count NOT_SUPPORTED, as on the lent H100 and H200
    readings = _read(fake, BOTH, times=3)
    assert not any(name.startswith("gpu_nvlink_") for name in readings[0].values)
    assert TIME in readings[0].values
    asked = [fields for _, fields in fake.field_requests]
    assert asked.count([(LINK_COUNT.id, 0)]) == 1
    assert all(field not in (161, 162, 163, 165) for fields in asked for field, _ in fields)


#: nvml.h (CUDA 13.0, R580) as quoted: ``#define NVML_FI_... <id>``; the per-link L<n> fields
#: are 32-37/96-101 (CRC flit), 39-44/102-107 (CRC data), 46-51/108-113 (replay), 53-58/114-119
#: (recovery).
NVML_H = {
    "NVML_FI_DEV_PERF_POLICY_POWER": 74, "NVML_FI_DEV_PERF_POLICY_THERMAL": 75,
    "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST": 76, "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT": 77,
    "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION": 78, "NVML_FI_DEV_PERF_POLICY_RELIABILITY": 79,
    "NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS": 80,
    "NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS": 81,
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN": 269,
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN": 270,
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN": 271,
    "NVML_FI_DEV_NVLINK_LINK_COUNT": 91, "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY": 161,
    "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY": 162, "NVML_FI_DEV_NVLINK_ERROR_DL_CRC": 163,
    "NVML_FI_DEV_NVLINK_GET_STATE": 165,
    **{f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}": (first + link if link < 6
                                                          else sixth + link - 6)
       for kind, first, sixth in (("CRC_FLIT", 32, 96), ("CRC_DATA", 39, 102),
                                  ("REPLAY", 46, 108), ("RECOVERY", 53, 114))
       for link in range(12)},
    "NVML_PERF_POLICY_POWER": 0, "NVML_PERF_POLICY_THERMAL": 1, "NVML_PERF_POLICY_SYNC_BOOST": 2,
    "NVML_PERF_POLICY_BOARD_LIMIT": 3, "NVML_PERF_POLICY_LOW_UTILIZATION": 4,
    "NVML_PERF_POLICY_RELIABILITY": 5, "NVML_PERF_POLICY_TOTAL_APP_CLOCKS": 10,
    "NVML_PERF_POLICY_TOTAL_BASE_CLOCKS": 11,
}


def _declared() -> dict[str, int]:
    found: dict[str, int] = {LINK_COUNT.name: LINK_COUNT.id}
    for row in metrics.GPU_ROWS:
        if isinstance(row.nvml, NvmlFields):
            for read in row.nvml.reads:
                found.update((field.name, field.id) for field in read.fields)
                if read.policy is not None:
                    found[read.policy.name] = read.policy.value
    return found


def test_field_ids_are_nvml_h_ones() -> None:
    assert _declared() == NVML_H  # every id the rows use, and only quoted ones


@pytest.mark.parametrize("name", sorted(NVML_H))
def test_nvidias_binding_agrees_with_the_quoted_header(name: str) -> None:
    assert getattr(pynvml, name) == NVML_H[name]
