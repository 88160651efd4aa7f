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
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import THROTTLE_REASONS
from exporter.snapshot import ProcessType, Snapshot
from exporter.sources.base import CollectOptions, SourceUnavailable
from exporter.sources.nvml import NvmlSource

pytestmark = pytest.mark.gpu
LOAD = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "cuda_load.py"
GIB = 1 << 30
ALL = CollectOptions(energy=True, pcie=True)


class CountingNvml(types.ModuleType):
    """pynvml, with every ``nvml*`` call counted (to prove what is asked once)."""

    def __init__(self, real: types.ModuleType) -> None:
        super().__init__("pynvml")
        self._real = real
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (callable(value) and name.startswith("nvml")):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


@pytest.fixture(scope="module")
def pynvml() -> Iterator[types.ModuleType]:
    import pynvml as real  # noqa: PLC0415 - importable once conftest let us run

    real.nvmlInit()
    yield real
    real.nvmlShutdown()


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
    snap = source.collect(CollectOptions())
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
        assert g.memory_used_bytes is not None
        assert g.memory_free_bytes is not None
        assert g.memory_reserved_bytes is not None  # memory info v2 on a current driver
        accounted = g.memory_used_bytes + g.memory_free_bytes + g.memory_reserved_bytes
        print(f"GPU {g.identity.index}: total-used-free-reserved = {total - accounted} B")
        assert abs(total - accounted) <= total // 100
        assert g.utilization_ratio is not None
        assert 0.0 <= g.utilization_ratio <= 1.0
        assert g.memory_utilization_ratio is not None
        assert 0.0 <= g.memory_utilization_ratio <= 1.0
        assert g.temperature_celsius is not None
        assert 5 <= g.temperature_celsius <= 110
        assert g.power_limit_watts is not None
        assert g.power_limit_watts > 50
        assert g.power_usage_watts is not None
        assert 5 < g.power_usage_watts < g.power_limit_watts * 1.5
        for clock in (g.sm_clock_hertz, g.memory_clock_hertz, g.graphics_clock_hertz):
            assert clock is not None
            assert 1e7 < clock < 1e10
        assert g.performance_state is not None
        assert 0 <= g.performance_state <= 15
        assert g.throttle is not None
        assert set(g.throttle.active) == set(THROTTLE_REASONS)
        handle = pynvml.nvmlDeviceGetHandleByIndex(g.identity.index)
        try:
            ecc_on = pynvml.nvmlDeviceGetEccMode(handle)[0] == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            ecc_on = False
        assert (g.ecc is not None) == ecc_on
        assert g.energy_joules is not None
        assert g.energy_joules > 0
        assert g.pcie_rx_bytes_per_second is not None
        assert g.pcie_rx_bytes_per_second >= 0
        assert g.pcie_tx_bytes_per_second is not None
        assert g.pcie_tx_bytes_per_second >= 0
        print(g)


def test_energy_counter_grows(source: NvmlSource) -> None:
    first = source.collect(ALL).gpus[0].energy_joules
    time.sleep(1.5)
    second = source.collect(ALL).gpus[0].energy_joules
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
        snap = source.collect(CollectOptions())
    assert all(g.fan_speed_ratio is None for g in snap.gpus)
    assert counting.calls["nvmlDeviceGetFanSpeed"] == len(snap.gpus)
    assert all("fan" in fields for fields in source.unsupported_fields().values())
    print("unsupported fields:", source.unsupported_fields())


def test_close_then_start_again(source: NvmlSource) -> None:
    before = [g.identity for g in source.collect(CollectOptions()).gpus]
    source.close()
    assert not source.started
    with pytest.raises(SourceUnavailable):
        source.collect(CollectOptions())
    source.start()
    after = source.collect(CollectOptions())
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
            snap = source.collect(CollectOptions())
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
        snap = source.collect(CollectOptions())
        if _find(snap, busy.pid) is None and _find(snap, idle.pid) is None:
            break
        time.sleep(0.2)
    assert _find(snap, busy.pid) is None
    assert _find(snap, idle.pid) is None
