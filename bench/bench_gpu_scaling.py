"""Collection time vs GPU count, with NVML calls as slow as on an H200.

Usage (repository root; hold the bench lock here):

    .venv/bin/python bench/bench_gpu_scaling.py [--rounds 40] [--gpus 1,2,4,8,16]

The NVML source reads fake H200s (``tests.sources.fake_nvml``) through ``SlowNvml``
(``tests.sources.slow_nvml``), whose calls take their median H200 latency: per-process
utilisation 1.8 ms per busy GPU, energy 2.8 ms, PCIe 20.8 ms, cheap calls 1-7 µs. Every GPU
holds two processes (so the per-process utilisation call is made on each). Printed: the
median and p95 of a fresh collection for the default field groups, with the opt-in energy
group, and with energy and PCIe, for each GPU count; and ``serial``, the sum of the delayed
calls' latencies, which is what reading the GPUs one after another must cost at least.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import percentile, timed_ms
from exporter.catalogue.metrics import Group, default_groups
from exporter.sources.nvml.source import NvmlSource
from tests.sources.fake_nvml import FakeNvml, FakeProcess, FakeSample, h200
from tests.sources.slow_nvml import SlowNvml

CASES: dict[str, frozenset[Group]] = {
    "default": default_groups(),
    "+energy": default_groups() | {Group.ENERGY},
    "+energy+pcie": default_groups() | {Group.ENERGY, Group.PCIE},
}
#: Delayed calls a collection makes per busy GPU, by case (what "serial" adds up).
SLOW_CALLS: dict[str, tuple[str, ...]] = {
    "default": ("nvmlDeviceGetProcessUtilization",),
    "+energy": ("nvmlDeviceGetProcessUtilization", "nvmlDeviceGetTotalEnergyConsumption"),
    "+energy+pcie": ("nvmlDeviceGetProcessUtilization", "nvmlDeviceGetTotalEnergyConsumption",
                     "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetPcieThroughput"),
}


def busy_node(gpus: int) -> SlowNvml:
    """``gpus`` H200s, each with a busy and an idle process, behind H200 latencies."""
    fake = FakeNvml([h200(i) for i in range(gpus)])
    for i, gpu in enumerate(fake.gpus):
        busy, idle = 10_000 + 2 * i, 10_001 + 2 * i
        gpu.compute = [FakeProcess(pid=busy, used_memory=20 << 30),
                       FakeProcess(pid=idle, used_memory=8 << 30)]
        gpu.samples = [FakeSample(pid=busy, timestamp=1 << 62, sm=97)]  # always newer
    return SlowNvml(fake)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40, help="collections per cell (40)")
    parser.add_argument("--gpus", default="1,2,4,8,16", help="GPU counts (1,2,4,8,16)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.gpus.split(",")]
    if not 1 <= args.rounds <= 1000 or not all(1 <= n <= 64 for n in counts):
        parser.error("--rounds must be 1..1000 and GPU counts 1..64")
    header = f"{'GPUs':>4}" + "".join(
        f" | {case + ' p50':>17} {'p95':>7} {'serial':>7}" for case in CASES)
    print("fresh NVML collection, ms (fake H200s with H200 call latencies, 2 processes per GPU)")
    print(header)
    print("-" * len(header))
    for count in counts:
        row = f"{count:>4}"
        for case, groups in CASES.items():
            nvml = busy_node(count)
            source = NvmlSource(hostname="bench", nvml=nvml)
            source.start()
            try:
                samples = timed_ms(lambda s=source, g=groups: s.collect(g), args.rounds, 3)
            finally:
                source.close()
            serial = count * sum(nvml.latency_of(name) for name in SLOW_CALLS[case]) * 1e3
            row += (f" | {statistics.median(samples):>17.2f} {percentile(samples, 95):>7.2f} "
                    f"{serial:>7.2f}")
        print(row, flush=True)
    print("(serial: the delayed NVML calls' latencies added up, the floor of a one-by-one read)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
