"""NvmlSource on a real GPU: every NVML code path the source has, checked against pynvml itself.

Skipped without NVML (see conftest). The process tests start small torch processes
(scripts/gpu/cuda_load.py) and skip when torch is not installed.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue.metrics import SWITCHABLE_GROUPS, THROTTLE_REASONS, Group, default_groups
from exporter.snapshot import ProcessType, Snapshot
from exporter.sources.base import SourceUnavailable
from exporter.sources.nvml.source import NvmlSource
from tests.gpu.counting import CountingNvml

pytestmark = pytest.mark.gpu
LOAD = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "cuda_load.py"
GIB = 1 << 30
ALL = frozenset(SWITCHABLE_GROUPS)


@pytest.fixture
def counting(pynvml: types.ModuleType) -> CountingNvml:
    return CountingNvml(pynvml)


@pytest.fixture
def source(counting: CountingNvml) -> Iterator[NvmlSource]:
    src = NvmlSource(hostname="gpu-test", nvml=counting)
    src.start()
    yield src
    src.close()


def test_identity_and_versions_match_pynvml(source: NvmlSource, pynvml: types.ModuleType) -> None:
    snap = source.collect(default_groups())
    assert len(snap.gpus) == pynvml.nvmlDeviceGetCount()
    assert snap.driver_version == pynvml.nvmlSystemGetDriverVersion()
    assert re.fullmatch(r"\d+\.\d+", snap.cuda_driver_version or "")
    assert snap.nvml_version == pynvml.nvmlSystemGetNVMLVersion()
    for reading in snap.gpus:
        handle = pynvml.nvmlDeviceGetHandleByIndex(reading.identity.index)
        ident = reading.identity
        assert ident.uuid == pynvml.nvmlDeviceGetUUID(handle)
        assert ident.uuid.startswith("GPU-")
        assert ident.name == pynvml.nvmlDeviceGetName(handle)
        assert ident.pci_bus_id == pynvml.nvmlDeviceGetPciInfo(handle).busId
        assert ident.memory_total_bytes == pynvml.nvmlDeviceGetMemoryInfo(handle).total
        assert ident.power_limit_default_watts is None or ident.power_limit_default_watts > 50
        print(ident)


def test_every_group_plausible_with_opt_ins(source: NvmlSource, pynvml: types.ModuleType) -> None:
    snap = source.collect(ALL)
    assert snap.errors == {}
    for g in snap.gpus:
        assert g.up, g.error
        total = g.identity.memory_total_bytes
        assert g.value("gpu_memory_used_bytes") is not None
        assert g.value("gpu_memory_free_bytes") is not None
        reserved = g.value("gpu_memory_reserved_bytes")
        assert reserved is not None  # memory info v2 on a current driver
        accounted = (g.value("gpu_memory_used_bytes") + g.value("gpu_memory_free_bytes")
                     + reserved)
        print(f"GPU {g.identity.index}: total-used-free-reserved = {total - accounted} B")
        assert abs(total - accounted) <= total // 100
        assert g.value("gpu_utilization_ratio") is not None
        assert 0.0 <= g.value("gpu_utilization_ratio") <= 1.0
        assert g.value("gpu_memory_utilization_ratio") is not None
        assert 0.0 <= g.value("gpu_memory_utilization_ratio") <= 1.0
        assert g.value("gpu_temperature_celsius") is not None
        assert 5 <= g.value("gpu_temperature_celsius") <= 110
        assert g.value("gpu_power_limit_watts") is not None
        assert g.value("gpu_power_limit_watts") > 50
        assert g.value("gpu_power_usage_watts") is not None
        assert 5 < g.value("gpu_power_usage_watts") < g.value("gpu_power_limit_watts") * 1.5
        for name in ("gpu_sm_clock_hertz", "gpu_memory_clock_hertz", "gpu_graphics_clock_hertz"):
            clock = g.value(name)
            assert clock is not None
            assert 1e7 < clock < 1e10
        assert g.value("gpu_performance_state") is not None
        assert 0 <= g.value("gpu_performance_state") <= 15
        assert g.labelled("gpu_throttle_reason_active") is not None
        assert set(g.labelled("gpu_throttle_reason_active")) == set(THROTTLE_REASONS)
        handle = pynvml.nvmlDeviceGetHandleByIndex(g.identity.index)
        try:
            ecc_on = pynvml.nvmlDeviceGetEccMode(handle)[0] == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            ecc_on = False
        assert (g.labelled("gpu_ecc_errors_total") is not None) == ecc_on
        assert g.value("gpu_energy_consumed_joules_total") is not None
        assert g.value("gpu_energy_consumed_joules_total") > 0
        assert g.labelled("gpu_pcie_throughput_bytes_per_second") is not None
        assert g.labelled("gpu_pcie_throughput_bytes_per_second")["rx"] >= 0
        assert g.labelled("gpu_pcie_throughput_bytes_per_second")["tx"] is not None
        assert g.labelled("gpu_pcie_throughput_bytes_per_second")["tx"] >= 0
        bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
        assert g.value("gpu_memory_bar1_total_bytes") == bar1.bar1Total  # H200: 256 GiB
        assert g.value("gpu_memory_bar1_total_bytes") >= total
        used = g.value("gpu_memory_bar1_used_bytes")
        assert used is not None
        assert 0 < used <= bar1.bar1Total
        print(g)


def test_energy_counter_grows(source: NvmlSource) -> None:
    first = source.collect(ALL).gpus[0].value("gpu_energy_consumed_joules_total")
    time.sleep(1.5)
    second = source.collect(ALL).gpus[0].value("gpu_energy_consumed_joules_total")
    assert first is not None
    assert second is not None
    assert second > first  # an H200 idles at ~70 W: ~100 J in 1.5 s


def test_not_supported_fan_is_asked_once(
    source: NvmlSource, counting: CountingNvml, pynvml: types.ModuleType
) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    try:
        pynvml.nvmlDeviceGetFanSpeed(handle)
        pytest.skip("this GPU has a fan")
    except pynvml.NVMLError_NotSupported:
        pass
    for _ in range(3):
        snap = source.collect(default_groups())
    assert all(g.value("gpu_fan_speed_ratio") is None for g in snap.gpus)
    assert counting.calls["nvmlDeviceGetFanSpeed"] == len(snap.gpus)
    assert all("nvmlDeviceGetFanSpeed" in fields for fields in source.unsupported_fields().values())
    print("unsupported fields:", source.unsupported_fields())


def test_close_then_start_again(source: NvmlSource) -> None:
    before = [g.identity for g in source.collect(default_groups()).gpus]
    source.close()
    assert not source.started
    with pytest.raises(SourceUnavailable):
        source.collect(default_groups())
    source.start()
    after = source.collect(default_groups())
    assert [g.identity for g in after.gpus] == before
    assert all(g.up for g in after.gpus)


def _start_load(gib: float, busy: bool) -> subprocess.Popen[str]:
    args = [sys.executable, str(LOAD), "--gpu", "0", "--gib", str(gib), "--seconds", "120"]
    proc = subprocess.Popen([*args, "--busy"] if busy else args, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "ready <pid>" once the memory is held
    assert line.startswith("ready"), line
    return proc


def _find(snap: Snapshot, pid: int) -> Any:
    return next((p for p in snap.gpus[0].processes if p.pid == pid), None)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_processes_memory_and_utilization(source: NvmlSource) -> None:
    busy = _start_load(2.0, busy=True)
    idle = _start_load(1.0, busy=False)
    try:
        seen_busy: list[float | None] = []
        seen_idle: list[float | None] = []
        for _ in range(6):
            time.sleep(0.5)
            snap = source.collect(default_groups())
            b, i = _find(snap, busy.pid), _find(snap, idle.pid)
            assert b is not None, snap.gpus[0].processes
            assert i is not None, snap.gpus[0].processes
            seen_busy.append(b.sm_utilization_ratio)
            seen_idle.append(i.sm_utilization_ratio)
        assert b.type is ProcessType.COMPUTE
        assert 2 * GIB < b.used_memory_bytes < 4 * GIB  # tensor + CUDA context + cuBLAS
        assert 1 * GIB < i.used_memory_bytes < 3 * GIB
        assert b.owner is None
        print("busy", b, "\nidle", i, "\nratios", seen_busy, seen_idle)
        assert max(r or 0.0 for r in seen_busy) > 0.2
        assert max(r or 0.0 for r in seen_idle) < 0.05
        assert all(r is not None for r in seen_busy + seen_idle)
        funcs = source.process_list_functions()
        print("process-list functions:", funcs)
        assert funcs["compute"] is not None
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        snap = source.collect(default_groups())
        if _find(snap, busy.pid) is None and _find(snap, idle.pid) is None:
            break
        time.sleep(0.2)
    assert _find(snap, busy.pid) is None
    assert _find(snap, idle.pid) is None


def test_gpm_windows_on_a_real_gpu(source: NvmlSource, counting: CountingNvml,
                                   pynvml: types.ModuleType) -> None:
    """GPM through the source: support asked once, the first collection only opens the window,
    every later one reports ratios in 0-1 (idle: SM activity ~0), and NVLink series exist only
    where the GPU has links; the graphics-engine metric only with its opt-in group."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
        first = source.collect(default_groups()).gpus[0]
        assert first.labelled("gpu_exporter_gpm_status") == {"not_supported": 1.0}
        return
    first = source.collect(default_groups()).gpus[0]
    assert first.labelled("gpu_exporter_gpm_status") == {"ok": 1.0}
    assert first.value("gpu_sm_active_ratio") is None
    readings = []
    for _ in range(4):
        time.sleep(0.3)
        readings.append(source.collect(default_groups() | {Group.GPM_ENGINE}).gpus[0])
    for reading in readings:
        print({k: v for k, v in reading.values.items() if "active" in k or "traffic" in k})
        for name in ("gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
                     "gpu_dram_active_ratio", "gpu_graphics_engine_active_ratio"):
            value = reading.value(name)
            assert value is not None, name
            assert 0.0 <= value <= 1.0, (name, value)
        for name in ("gpu_tensor_pipe_active_ratio", "gpu_pipe_active_ratio"):
            assert all(0.0 <= v <= 1.0 for v in (reading.labelled(name) or {"x": -1}).values())
        pcie = reading.labelled("gpu_pcie_traffic_bytes_per_second")
        assert pcie is not None
        assert set(pcie) == {"rx", "tx"}
    try:
        pynvml.nvmlDeviceGetNvLinkState(handle, 0)
        links = True
    except pynvml.NVMLError:
        links = False
    assert ("gpu_nvlink_traffic_bytes_per_second" in readings[-1].values) is links
    assert counting.calls["nvmlGpmQueryDeviceSupport"] == 1
    assert counting.calls["nvmlGpmSampleGet"] == 5
    assert counting.calls["nvmlGpmSampleAlloc"] == 2


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_gpm_tells_a_spinning_kernel_from_real_work(source: NvmlSource) -> None:
    """One thread spinning in a kernel: NVML utilisation high, GPM SM activity near 0; a bf16
    matrix product: both high, tensor cores busy."""
    figures = {}
    for kind in ("spin", "bf16"):
        proc = subprocess.Popen([sys.executable, str(LOAD), "--gpu", "0", "--gib", "1",
                                 "--kind", kind, "--seconds", "60"], stdout=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("ready")
            time.sleep(2.0)
            source.collect(default_groups())
            time.sleep(2.0)
            reading = source.collect(default_groups()).gpus[0]
        finally:
            proc.kill()
            proc.wait(timeout=30)
        figures[kind] = (reading.value("gpu_utilization_ratio"),
                         reading.value("gpu_sm_active_ratio"),
                         reading.value("gpu_tensor_active_ratio"))
    print(figures)
    spin_util, spin_sm, _ = figures["spin"]
    assert spin_util is not None
    assert spin_sm is not None
    assert spin_util > 0.5
    assert spin_sm < 0.05
    _, bf16_sm, bf16_tensor = figures["bf16"]
    assert (bf16_sm or 0) > 0.8
    assert (bf16_tensor or 0) > 0.7
