"""Training-step overhead of the allocator publisher (gpu_exporter_torch): on vs off.

Usage::

    .venv/bin/python bench/bench_torch_publisher.py [--torch fake|cuda] [--blocks 5]
        [--interval 0.5 5] [--json OUT.json]

``--torch fake`` (default; no GPU or torch needed): the fake torch of the tests, and a
pure-Python training step (~1 ms, holding the GIL the whole time: the worst case for a
background Python thread). ``--torch cuda``: real torch on GPU 0, 8 x Linear(2048) forward,
backward and SGD (each step ends with ``torch.cuda.synchronize()``), 1 GiB of extra tensors.

Method: in one process, blocks of max(1 s, 2 x interval) alternate publisher off / on (ABAB,
so drift and warm-up hit both sides alike), ``--blocks`` pairs for each interval in
``--interval`` (so 2 x blocks x block seconds each: 10 s at 0.5 s, 100 s at 5 s). Reported: the
median step time with the publisher off and on, their difference, and the cost of one
publication (``publish_once``: memory_stats for each used device + JSON + write + rename)
measured directly, with the resulting duty cycle (cost / interval). The difference is taken per
(off, on) pair of blocks and given as mean +- standard error across pairs: a difference inside
that spread is not measurable on the machine at hand. Files go to a temporary
directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_exporter_torch import Publisher  # noqa: E402


def fake_step_factory() -> tuple[Callable[[], None], str]:
    from tests.fixtures import fake_torch  # noqa: PLC0415 - only for this workload

    fake_torch.reset()
    sys.modules["torch"] = fake_torch
    fake_torch.cuda.allocate(0, 1 << 30)

    def step() -> None:
        total = 0
        for i in range(20000):
            total += i * i
        fake_torch.cuda.allocate(0, 4096)
        fake_torch.cuda.free(0, 4096)

    return step, "fake torch, pure-Python step (GIL held throughout)"


def cuda_step_factory() -> tuple[Callable[[], None], str]:
    import torch  # noqa: PLC0415 - only for this workload

    if not torch.cuda.is_available():
        raise SystemExit("--torch cuda: no CUDA device")
    device = torch.device("cuda:0")
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(256, 2048, device=device)
    ballast = torch.empty(1 << 30, dtype=torch.uint8, device=device)  # 1 GiB held

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        loss = model(batch).square().mean()
        loss.backward()
        optimiser.step()
        torch.cuda.synchronize()

    step.ballast = ballast  # type: ignore[attr-defined]  # keep it alive
    name = f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, 8x Linear(2048)"
    return step, name


def timed_block(step: Callable[[], None], seconds: float) -> list[float]:
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def publish_cost(directory: str, calls: int = 200) -> tuple[float, float]:
    """(median, p95) microseconds of one publication."""
    publisher = Publisher(directory)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        if not publisher.publish_once():
            raise SystemExit(f"publish_once wrote nothing (errors={publisher.errors})")
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def compare(
    step: Callable[[], None], directory: str, interval: float, blocks: int
) -> dict[str, Any]:
    """``blocks`` pairs of (off, on) blocks; the figure of merit is the per-pair difference of
    median step times, whose spread across pairs shows the noise of the machine."""
    block_seconds = max(1.0, 2 * interval)  # at least two publications per "on" block
    off: list[float] = []
    on: list[float] = []
    differences: list[float] = []
    writes = 0
    for _ in range(blocks):
        off_block = timed_block(step, block_seconds)
        publisher = Publisher(directory, interval)
        publisher.start()
        on_block = timed_block(step, block_seconds)
        publisher.stop(final=False)
        writes += publisher.writes
        off += off_block
        on += on_block
        off_median = statistics.median(off_block)
        differences.append((statistics.median(on_block) - off_median) / off_median * 100)
    spread = statistics.stdev(differences) / len(differences) ** 0.5 if blocks > 1 else 0.0
    return {
        "interval_seconds": interval,
        "steps_off": len(off),
        "steps_on": len(on),
        "off_median_ms": statistics.median(off) * 1e3,
        "on_median_ms": statistics.median(on) * 1e3,
        "off_mean_ms": statistics.fmean(off) * 1e3,
        "on_mean_ms": statistics.fmean(on) * 1e3,
        "pair_differences_percent": differences,
        "difference_percent": statistics.fmean(differences),
        "difference_standard_error_percent": spread,
        "publications": writes,
        "seconds_with_publisher": sum(on),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--torch", choices=("fake", "cuda"), default="fake")
    parser.add_argument("--blocks", type=int, default=5, help="off/on pairs per interval")
    parser.add_argument("--interval", type=float, nargs="+", default=[0.5, 5.0])
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()

    step, what = fake_step_factory() if args.torch == "fake" else cuda_step_factory()
    for _ in range(50):  # warm-up
        step()
    results: dict[str, Any] = {"workload": what, "python": sys.version.split()[0],
                               "cpus": os.cpu_count(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="torch-publisher-bench-") as directory:
        median_us, p95_us = publish_cost(directory)
        results["publish_once_median_us"] = median_us
        results["publish_once_p95_us"] = p95_us
        print(f"workload: {what}")
        print(f"one publication: median {median_us:.1f} us, p95 {p95_us:.1f} us")
        for interval in args.interval:
            run = compare(step, directory, interval, args.blocks)
            run["duty_cycle_percent"] = median_us / 1e6 / interval * 100
            results["runs"].append(run)
            print(
                f"interval {interval:>4} s: step median off {run['off_median_ms']:.3f} ms, "
                f"on {run['on_median_ms']:.3f} ms; on-off per pair "
                f"{run['difference_percent']:+.2f} % +- "
                f"{run['difference_standard_error_percent']:.2f}"
                f" % (standard error, {args.blocks} pairs); {run['publications']} publications "
                f"in {run['seconds_with_publisher']:.1f} s; publication duty cycle "
                f"{run['duty_cycle_percent']:.4f} %"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
