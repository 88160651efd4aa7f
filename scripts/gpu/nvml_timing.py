"""Raw pynvml calls vs NvmlSource.collect for the default fields, side by side, on real GPUs.

Usage (on the GPU machine, from the repository root):
    python3 scripts/gpu/nvml_timing.py [--iterations 300] [--json OUT.json]

Prints what the driver reports (versions, NOT_SUPPORTED fields, process-list call used), then
p50/p99 of a raw collection and of ``NvmlSource.collect(default_groups())``, idle and with one
busy torch process per GPU (scripts/gpu/cuda_load.py; skipped without torch). Target: the
source within 2x of the raw calls. Then what the GPM group adds to a collection per GPU
(collections with and without it, alternating; target: at most 0.5 ms).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml

from exporter.catalogue.metrics import SWITCHABLE_GROUPS, Group, default_groups
from exporter.sources.nvml.gpm import plan
from exporter.sources.nvml.source import NvmlSource

LOAD = Path(__file__).with_name("cuda_load.py")


class Raw:
    """The same NVML calls the source makes for the default groups, with nothing around them
    (BAR1, energy, PCIe and torch are opt-in and left out of both)."""

    def __init__(self) -> None:
        count = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.last_seen = [0] * count
        h = self.handles[0]
        self.ecc = _supported(pynvml.nvmlDeviceGetTotalEccErrors, h, 0, 0)
        self.fan = _supported(pynvml.nvmlDeviceGetFanSpeed, h)
        self.remapped = _supported(pynvml.nvmlDeviceGetRemappedRows, h)
        # GPM as the source reads it: a sample into the spare buffer, the window's metrics.
        self.gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        gpm = plan(default_groups(), lambda c: int(getattr(pynvml, c.name, c.value)))
        self.gpm_ids = [m.metric_id for m in gpm.device if not m.nvlink] if gpm else []
        self.buffers = [[pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
                        for _ in self.handles] if self.gpm else []
        self.request = pynvml.c_nvmlGpmMetricsGet_t()
        self.turn = 0
        # Not timed: MIG mode (the source asks it once per GPU) and XID counts (the event
        # waiter's thread counts them off the collection path).

    def collect(self) -> list[Any]:
        out = []
        for i, h in enumerate(self.handles):
            row: list[Any] = [
                pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
                pynvml.nvmlDeviceGetUtilizationRates(h),
                pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
                pynvml.nvmlDeviceGetPowerUsage(h),
                pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_GRAPHICS),
                pynvml.nvmlDeviceGetPerformanceState(h),
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            ]
            if self.ecc:  # volatile (group ecc) and lifetime (group remapping) counts
                row.append(pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0))
                row.append(pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0))
                row.append(pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 1))
                row.append(pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 1))
            if self.remapped:
                row.append(pynvml.nvmlDeviceGetRemappedRows(h))
            if self.fan:
                row.append(pynvml.nvmlDeviceGetFanSpeed(h))
            compute = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)
            graphics = pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(h)
            if compute or graphics:
                try:
                    samples = pynvml.nvmlDeviceGetProcessUtilization(h, self.last_seen[i])
                    if samples:
                        self.last_seen[i] = max(s.timeStamp for s in samples)
                except pynvml.NVMLError_NotFound:
                    samples = []
                row.append(samples)
            row += [compute, graphics]
            if self.gpm:
                row.append(self._gpm(h, self.buffers[i]))
            out.append(row)
        self.turn ^= 1
        return out

    def _gpm(self, handle: Any, buffers: list[Any]) -> Any:
        new, old = buffers[self.turn], buffers[1 - self.turn]
        pynvml.nvmlGpmSampleGet(handle, new)
        request = self.request
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.gpm_ids)
        request.sample1, request.sample2 = old, new
        for index, metric_id in enumerate(self.gpm_ids):
            request.metrics[index].metricId = metric_id
        try:
            return pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError_InvalidArgument:  # the very first call: one buffer is empty
            return None


def _supported(fn: Any, *args: Any) -> bool:
    try:
        fn(*args)
    except pynvml.NVMLError_NotSupported:
        return False
    return True


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_us": statistics.median(ordered) * 1e6,
            "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
            "n": len(ordered)}


def compare(source: NvmlSource, raw: Raw, iterations: int) -> dict[str, Any]:
    """Interleave raw and source collections so both see the same GPU state."""
    groups = default_groups()
    for _ in range(10):  # warm caches, probe NOT_SUPPORTED fields
        raw.collect()
        source.collect(groups)
    raw_t: list[float] = []
    src_t: list[float] = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        raw.collect()
        t1 = time.perf_counter()
        source.collect(groups)
        t2 = time.perf_counter()
        raw_t.append(t1 - t0)
        src_t.append(t2 - t1)
    r, s = _stats(raw_t), _stats(src_t)
    return {"raw": r, "source": s, "ratio_p50": s["p50_us"] / r["p50_us"],
            "ratio_p99": s["p99_us"] / r["p99_us"]}


def gpm_cost(source: NvmlSource, gpus: int, iterations: int) -> dict[str, Any]:
    """What the GPM group adds to one collection, per GPU: collections with and without it,
    alternating (each with GPM closes the window since the previous one with it)."""
    with_gpm = default_groups()
    without = with_gpm - {Group.GPM}
    timed: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(iterations * 2):
        on = round_ % 2 == 0
        t0 = time.perf_counter()
        source.collect(with_gpm if on else without)
        timed[on].append(time.perf_counter() - t0)
    on, off = _stats(timed[True]), _stats(timed[False])
    return {"with_gpm": on, "without_gpm": off,
            "added_per_gpu_ms": (on["p50_us"] - off["p50_us"]) / 1000 / max(1, gpus)}


def report(source: NvmlSource) -> dict[str, Any]:
    """What the driver reports: versions, unsupported fields, process-list calls."""
    snap = source.collect(frozenset(SWITCHABLE_GROUPS))
    g = snap.gpus[0]
    return {
        "pynvml_file": pynvml.__file__,
        "nvidia_ml_py": importlib.metadata.version("nvidia-ml-py"),
        "driver": snap.driver_version, "cuda": snap.cuda_driver_version,
        "nvml": snap.nvml_version, "gpus": [r.identity.name for r in snap.gpus],
        "unsupported": {str(k): sorted(v) for k, v in source.unsupported_fields().items()},
        "process_list_functions": source.process_list_functions(),
        "errors": dict(snap.errors),
        "gpu0": dict(g.values),
        "gpu0_identity": str(g.identity),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pynvml.nvmlInit()
    source = NvmlSource(hostname="timing")
    t0 = time.perf_counter()
    source.start()
    result: dict[str, Any] = {"start_ms": (time.perf_counter() - t0) * 1e3}
    result["driver_report"] = report(source)
    print(json.dumps(result, indent=2, default=str), flush=True)
    raw = Raw()
    result["idle"] = compare(source, raw, args.iterations)
    print("idle:", json.dumps(result["idle"]), flush=True)
    if importlib.util.find_spec("torch") is not None:
        loads = [subprocess.Popen([sys.executable, str(LOAD), "--gpu", str(i), "--gib", "2",
                                   "--busy", "--seconds", "120"], stdout=subprocess.PIPE,
                                  text=True) for i in range(len(raw.handles))]
        try:
            for proc in loads:
                assert proc.stdout is not None
                print(proc.stdout.readline().strip(), flush=True)
            time.sleep(1.0)
            result["busy"] = compare(source, raw, args.iterations)
            print("busy (1 torch process per GPU):", json.dumps(result["busy"]), flush=True)
            snap = source.collect(default_groups())
            result["busy_processes"] = [str(p) for p in snap.gpus[0].processes]
            try:  # which clock the sample timestamps use (microseconds)
                samples = pynvml.nvmlDeviceGetProcessUtilization(raw.handles[0], 0)
            except pynvml.NVMLError as exc:
                samples = []
                print("process utilisation:", exc, flush=True)
            now_us = int(time.time() * 1e6)
            result["sample_timestamp_vs_now_us"] = [int(s.timeStamp) - now_us
                                                    for s in samples][:4]
            print("processes:", result["busy_processes"], flush=True)
            print("process sample timestamp minus now (us):",
                  result["sample_timestamp_vs_now_us"], flush=True)
        finally:
            for proc in loads:
                proc.kill()
                proc.wait(timeout=30)
    result["gpm_cost"] = gpm_cost(source, len(raw.handles), args.iterations)
    print("GPM group, idle:", json.dumps(result["gpm_cost"]), flush=True)
    source.close()
    verdict = all(result[k]["ratio_p50"] <= 2.0 for k in ("idle", "busy") if k in result)
    print("VERDICT: source within 2x of raw (p50):", "PASS" if verdict else "FAIL", flush=True)
    gpm_ok = result["gpm_cost"]["added_per_gpu_ms"] <= 0.5
    print("VERDICT: GPM adds at most 0.5 ms per GPU (p50):", "PASS" if gpm_ok else "FAIL",
          flush=True)
    verdict = verdict and gpm_ok
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
