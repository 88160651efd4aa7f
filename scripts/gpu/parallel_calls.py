"""Do slow NVML calls overlap when made from several threads? (GPU machine; ~30 s.)

Usage (repository root): ``python3 scripts/gpu/parallel_calls.py [--threads 4] [--rounds 50]``

The exporter reads different GPUs on different threads (``exporter/sources/nvml/workers.py``),
counting on NVML being thread-safe and on ctypes releasing the GIL during each call. With one
lent GPU the closest check is the same GPU from several threads: for each slow call
(total energy, per-process utilisation, PCIe throughput) it times ``--threads`` calls made one
after another and the same number made at once through ``GpuWorkers``, and checks every
concurrent call answered like the serial ones (no error, same kind of value). A speed-up near
the thread count means the calls overlap (and so, all the more, calls on different GPUs);
near 1 means the driver serialises them on one GPU, which says nothing about different GPUs.
Starts one busy torch process (scripts/gpu/cuda_load.py) when torch is there, so that
per-process utilisation has a sample to return. PASS/FAIL is on correctness only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pynvml  # noqa: E402

from exporter.sources.nvml.workers import Done, GpuWorkers  # noqa: E402


def calls(handle: Any) -> dict[str, Callable[[], Any]]:
    def utilisation() -> Any:
        try:
            return pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
        except pynvml.NVMLError_NotFound:
            return []

    return {
        "nvmlDeviceGetTotalEnergyConsumption": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(
            handle),
        "nvmlDeviceGetProcessUtilization": utilisation,
        "nvmlDeviceGetPcieThroughput": lambda: pynvml.nvmlDeviceGetPcieThroughput(
            handle, pynvml.NVML_PCIE_UTIL_RX_BYTES),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    load = None
    if importlib.util.find_spec("torch") is not None:
        load = subprocess.Popen([sys.executable, str(ROOT / "scripts/gpu/cuda_load.py"), "--gpu",
                                 "0", "--gib", "1", "--busy", "--seconds", "300"],
                                stdout=subprocess.PIPE, text=True)
        assert load.stdout is not None
        print(load.stdout.readline().strip(), flush=True)
        time.sleep(1.0)
    workers: GpuWorkers[Any] = GpuWorkers(timeout=5.0)
    results: dict[str, dict[str, float]] = {}
    ok = True
    try:
        for name, call in calls(handle).items():
            serial, concurrent = [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                expected = [call() for _ in range(args.threads)]
                serial.append(time.perf_counter() - start)
                start = time.perf_counter()
                answers = workers.run({i: call for i in range(args.threads)})
                concurrent.append(time.perf_counter() - start)
                for answer in answers.values():
                    if not isinstance(answer, Done) or type(answer.value) is not type(
                            expected[0]):
                        print(f"[FAIL] {name}: concurrent call answered {answer!r}", flush=True)
                        ok = False
            s, c = statistics.median(serial) * 1e3, statistics.median(concurrent) * 1e3
            results[name] = {"serial_ms": s, "concurrent_ms": c, "speedup": s / c}
            print(f"{name:<40} {args.threads} calls: serial {s:7.2f} ms, concurrent {c:7.2f} ms,"
                  f" speed-up {s / c:4.2f}x", flush=True)
    finally:
        workers.close()
        if load is not None:
            load.kill()
            load.wait(30)
    print(f"[{'PASS' if ok else 'FAIL'}] every concurrent call answered like the serial ones")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "parallel_calls.json").write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
