"""The exporter's GPM activity series against raw nvmlGpmMetricsGet, on a real GPU (Hopper+).

    python3 scripts/gpu/check_activity.py [--gpu 0] [--port 9478] [--seconds 4] [--json OUT]

Starts ``python3 -m exporter --source nvml`` on 127.0.0.1 and, one after the other, runs
workloads on one GPU (scripts/gpu/cuda_load.py): idle, fp16 and fp32 matrix products, a
memory-bound copy, and one thread spinning in a kernel. For each it brackets one window of
the exporter (a scrape, ``--seconds``, a scrape: the exporter's GPM window is the time
between its two collections) with its own GPM samples taken with pynvml right after the first
scrape and right before the second, and checks:

- every activity series the exporter reports is within 5 points of the raw figure;
- the expected order: fp16 tensor >= 0.8, fp32 tensor <= 0.05, the copy's DRAM above the
  matrix products', idle SM activity ~0, and the spinning kernel busy by utilisation with
  almost no SM activity ("busy but barely working").

Prints a PASS/FAIL table; exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pynvml  # noqa: E402

from exporter.catalogue import metrics  # noqa: E402
from exporter.sources.nvml.gpm import plan  # noqa: E402
from scripts.gpu.probes import scrape, stop, wait_ready  # noqa: E402
from scripts.gpu.results import check, save  # noqa: E402

LOAD = ROOT / "scripts" / "gpu" / "cuda_load.py"
WORKLOADS = ("idle", "fp16", "fp32", "copy", "spin")
TOLERANCE = 0.05  # 5 points of a 0-1 ratio


def key(row: str, label: str | None) -> str:
    """``row`` or ``row{label}``: how results name one series."""
    return row if label is None else f"{row}{{{label}}}"


class RawGpm:
    """GPM of one GPU through pynvml directly: a window between two samples."""

    def __init__(self, index: int) -> None:
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        gpm = plan(metrics.default_groups(), lambda c: int(getattr(pynvml, c.name, c.value)))
        assert gpm is not None
        self.wanted = [m for m in gpm.device if m.ratio]

    def begin(self) -> None:
        pynvml.nvmlGpmSampleGet(self.handle, self.samples[0])

    def end(self) -> dict[str, float]:
        """Series key -> value of the window since ``begin`` (ratios 0-1)."""
        pynvml.nvmlGpmSampleGet(self.handle, self.samples[1])
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.wanted)
        request.sample1, request.sample2 = self.samples
        for i, metric in enumerate(self.wanted):
            request.metrics[i].metricId = metric.metric_id
        pynvml.nvmlGpmMetricsGet(request)
        return {key(m.row, m.label): request.metrics[i].value * m.scale
                for i, m in enumerate(self.wanted) if request.metrics[i].nvmlReturn == 0}

    def close(self) -> None:
        for sample in self.samples:
            pynvml.nvmlGpmSampleFree(sample)


def exported(series: dict[str, list[Any]], gpu: int) -> dict[str, float]:
    """The exporter's GPM ratios of ``gpu``: series key -> value."""
    found: dict[str, float] = {}
    for row in (metrics.SM_ACTIVE, metrics.SM_OCCUPANCY, metrics.TENSOR_ACTIVE,
                metrics.TENSOR_PIPE_ACTIVE, metrics.DRAM_ACTIVE, metrics.PIPE_ACTIVE):
        for sample in series.get(row.name, []):
            if sample.labels.get("gpu") == str(gpu):
                found[key(row.name, sample.labels.get("pipe"))] = sample.value
    return found


def one_window(base: str, raw: RawGpm, seconds: float
               ) -> tuple[dict[str, list[Any]], dict[str, float]]:
    """Scrape, the raw window, scrape: the second scrape's GPM covers the raw window."""
    scrape(base)
    raw.begin()
    time.sleep(seconds)
    figures = raw.end()
    return scrape(base), figures


def run(args: argparse.Namespace, base: str, result: dict[str, Any]) -> None:
    raw = RawGpm(args.gpu)
    env = {**os.environ, "PYTHONPATH": ""}  # the load needs torch only
    try:
        for kind in WORKLOADS:
            load = subprocess.Popen([sys.executable, str(LOAD), "--gpu", str(args.gpu), "--gib",
                                     "4", "--kind", kind, "--seconds", "60"],
                                    stdout=subprocess.PIPE, text=True, env=env)
            try:
                assert load.stdout is not None
                ready = load.stdout.readline().startswith("ready")
                if not check(f"{kind}: load started", ready):
                    continue
                time.sleep(2.0)  # past warm-up: a steady workload
                series, figures = one_window(base, raw, args.seconds)
            finally:
                load.kill()
                load.wait(timeout=30)
            ours = exported(series, args.gpu)
            util = next((s.value for s in series.get(metrics.UTILIZATION.name, [])
                         if s.labels.get("gpu") == str(args.gpu)), None)
            result["workloads"][kind] = {"exporter": ours, "raw": figures, "utilization": util}
            print(f"{kind}: utilisation {util}\n  exporter {sorted(ours.items())}\n"
                  f"  raw      {sorted(figures.items())}", flush=True)
            apart = {name: (ours.get(name), round(value, 4)) for name, value in figures.items()
                     if name not in ours or abs(ours[name] - value) > TOLERANCE}
            check(f"{kind}: every series within {TOLERANCE:.0%} of raw GPM", not apart,
                  f"{len(figures)} compared; apart: {apart}")
    finally:
        raw.close()


def ordered(result: dict[str, Any]) -> None:
    """The order the workloads must show (on the exporter's series)."""
    loads = result["workloads"]

    def ours(kind: str, key: str) -> float:
        return float(loads.get(kind, {}).get("exporter", {}).get(key, float("nan")))

    tensor, dram = metrics.TENSOR_ACTIVE.name, metrics.DRAM_ACTIVE.name
    sm = metrics.SM_ACTIVE.name
    check("fp16: tensor activity >= 0.8", ours("fp16", tensor) >= 0.8, f"{ours('fp16', tensor)}")
    check("fp32: tensor activity <= 0.05", ours("fp32", tensor) <= 0.05,
          f"{ours('fp32', tensor)}")
    check("copy: DRAM above the matrix products'",
          ours("copy", dram) > max(ours("fp16", dram), ours("fp32", dram)),
          f"copy {ours('copy', dram)}, fp16 {ours('fp16', dram)}, fp32 {ours('fp32', dram)}")
    check("idle: SM activity ~0", ours("idle", sm) <= 0.01, f"{ours('idle', sm)}")
    util = loads.get("spin", {}).get("utilization")
    check("spin: busy by utilisation, barely working by SM activity",
          util is not None and util >= 0.5 and ours("spin", sm) < 0.05,
          f"utilisation {util}, SM activity {ours('spin', sm)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--port", type=int, default=9478)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pynvml.nvmlInit()
    base = f"http://127.0.0.1:{args.port}"
    result: dict[str, Any] = {"workloads": {}}
    log_path = Path(tempfile.mkdtemp(prefix="gpm-check-")) / "exporter.log"
    with log_path.open("wb") as log:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--source", "nvml", "--web.listen-address",
             f"127.0.0.1:{args.port}", "--collector.min-interval", "100ms"],
            cwd=ROOT, stderr=log)
    try:
        if check("exporter ready", wait_ready(base, exporter)):
            statuses = [s.labels.get("status") for s in
                        scrape(base).get(metrics.GPM_STATUS.name, [])
                        if s.labels.get("gpu") == str(args.gpu)]
            if check("GPM status ok", statuses == ["ok"], f"{statuses}"):
                run(args, base, result)
                ordered(result)
    finally:
        code = stop(exporter)
        check("exporter exits 0 on SIGTERM", code == 0, f"exit {code}")
        print("--- exporter log (tail) ---\n" + log_path.read_text(errors="replace")[-2000:])
    return 0 if save(result, args.json) else 1


if __name__ == "__main__":
    raise SystemExit(main())
