"""Field-value rows on a real GPU: throttle time read in one ``nvmlDeviceGetFieldValues`` call,
equal to the perf policies' ``nvmlDeviceGetViolationStatus``; NVLink rows only where the GPU
has links; the minor number the DRA join uses. Skipped without NVML (see conftest)."""

from __future__ import annotations

import os
import types
from typing import Any

import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, default_groups
from exporter.sources.nvml.source import NvmlSource
from tests.gpu.counting import CountingNvml

pytestmark = pytest.mark.gpu
GROUPS = default_groups() | {Group.THROTTLE_TIME, Group.NVLINK}
TIME = metrics.THROTTLE_TIME.name
LINK_ROWS = (metrics.NVLINK_CRC_FLIT_ERRORS, metrics.NVLINK_CRC_DATA_ERRORS,
             metrics.NVLINK_REPLAY_ERRORS, metrics.NVLINK_RECOVERY_ERRORS, metrics.NVLINK_STATE)


def test_throttle_time_in_one_call_equals_the_violation_counters(
        pynvml: types.ModuleType) -> None:
    counting = CountingNvml(pynvml)
    source = NvmlSource(hostname="gpu-test", nvml=counting, watch_events=False)
    source.start()
    try:
        source.collect(GROUPS)
        counting.calls.clear()
        snapshot = source.collect(GROUPS)
    finally:
        source.close()
    gpus = len(snapshot.gpus)
    assert snapshot.errors == {}
    # one field-value call per GPU; no violation-status call where every field answers
    assert counting.calls["nvmlDeviceGetFieldValues"] == gpus
    for reading in snapshot.gpus:
        found = reading.labelled(TIME)
        assert found is not None
        print(reading.identity.index, found)
        assert {"sw_power_cap", "low_utilization"} <= set(found)
        handle = pynvml.nvmlDeviceGetHandleByIndex(reading.identity.index)
        for read in metrics.THROTTLE_TIME_READS:
            if read.policy is None or read.label not in found:
                continue
            raw = pynvml.nvmlDeviceGetViolationStatus(handle, read.policy.value)
            # the same counter, read a moment later: at most that moment apart
            assert 0 <= raw.violationTime / 1e9 - found[read.label] < 2.0, read.label
        assert all(value >= 0 for value in found.values())


def test_nvlink_rows_only_where_the_gpu_has_links(pynvml: types.ModuleType) -> None:
    source = NvmlSource(hostname="gpu-test", nvml=pynvml, watch_events=False)
    source.start()
    try:
        snapshot = source.collect(GROUPS)
    finally:
        source.close()
    for reading in snapshot.gpus:
        handle = pynvml.nvmlDeviceGetHandleByIndex(reading.identity.index)
        answer = pynvml.nvmlDeviceGetFieldValues(handle, [91])[0]
        links = answer.value.uiVal if answer.nvmlReturn == 0 else 0
        print(f"GPU {reading.identity.index}: link count answer {answer.nvmlReturn}, {links}")
        for row in LINK_ROWS:
            found = reading.labelled(row.name)
            if not links:
                assert found is None, row.name  # absent, never 0
            elif found is not None:
                assert set(found) <= {str(link) for link in range(links)}


def test_the_minor_number_names_the_device_node(pynvml: types.ModuleType) -> None:
    source = NvmlSource(hostname="gpu-test", nvml=pynvml, watch_events=False)
    source.start()
    try:
        snapshot = source.collect(default_groups())
    finally:
        source.close()
    for reading in snapshot.gpus:
        minor = reading.identity.minor_number
        assert minor is not None
        assert minor == pynvml.nvmlDeviceGetMinorNumber(
            pynvml.nvmlDeviceGetHandleByIndex(reading.identity.index))
        if os.path.exists("/dev/nvidiactl"):
            assert os.path.exists(f"/dev/nvidia{minor}")


class WithoutFieldValues(CountingNvml):
    """pynvml as a binding without ``nvmlDeviceGetFieldValues`` (the fallback path)."""

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlDeviceGetFieldValues":
            raise AttributeError(name)
        return super().__getattr__(name)


def test_without_field_values_the_policies_give_the_same_counters(
        pynvml: types.ModuleType) -> None:
    readings = []
    for binding in (CountingNvml(pynvml), WithoutFieldValues(pynvml)):
        source = NvmlSource(hostname="gpu-test", nvml=binding, watch_events=False)
        source.start()
        try:
            readings.append(source.collect(GROUPS).gpus[0].labelled(TIME) or {})
        finally:
            source.close()
        if isinstance(binding, WithoutFieldValues):
            assert binding.calls["nvmlDeviceGetViolationStatus"] == len(
                [r for r in metrics.THROTTLE_TIME_READS if r.policy is not None])
    fields, policies = readings
    print(fields, policies)
    assert set(policies) == {r.label for r in metrics.THROTTLE_TIME_READS if r.policy is not None}
    for reason, value in policies.items():
        assert 0 <= value - fields[reason] < 2.0, reason  # read a moment later
