"""Resident memory: the floor and the exporter, in one run, then flat over many scrapes.

Usage (repository root; hold the bench lock here):

    .venv/bin/python bench/bench_memory.py [--scrapes 100000] [--nvml] [--fresh]
    python3 bench/bench_memory.py --nvml --cuda-processes 2 --scrapes 20000   # GPU machine

1. The floor, each step in one fresh interpreter, cumulative: Python alone; with ``--nvml``
   ``pynvml.nvmlInit()`` and one memory read (libnvidia-ml mapped); ``import fastapi, uvicorn,
   pydantic``; ``import prometheus_client``. No exporter can be smaller than that. For
   reference, the same interpreter then imports what the exporter imports at start-up and,
   with ``--nvml``, starts the exporter's NVML source and collects three times (NVML's own
   allocations for the calls the exporter makes, XID event registration included). Its
   resident memory by kind of mapping is read at the floor and after the references, to set
   against the exporter's. With ``--cuda-processes`` the floor is measured while they run.
2. The exporter (``--source nvml``, or the simulated 8x32 node), scraped over one keep-alive
   loopback connection with Prometheus' headers (OpenMetrics, gzip) ``--scrapes`` times;
   its VmRSS after a warm-up and at ten checkpoints, and the peak (VmHWM).

Targets: on NVML, RSS after scraping within 8 MB of the floor; on the simulated 8x32
node, at most 60 MB; and flat: RSS at the last checkpoint no more than 1 MB above the second
(the first tenth of the scrapes settles caches). Exit 1 with ``--check`` when one is missed.
``--fresh`` runs a new collection per scrape (``--collector.min-interval 0``); the default is
the exporter's default settings; exporter flags after ``--`` (e.g. ``-- --no-collector.xid``)
apply to the exporter and to the reference collections. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import ROOT, Scraper, Server, rss_mb

TARGET_OVER_FLOOR_MB = 8.0
TARGET_SIMULATED_MB = 60.0
TARGET_GROWTH_MB = 1.0
CHECKPOINTS = 10

#: Run in a fresh interpreter: prints one JSON line of floor steps (cumulative VmRSS, MiB), waits
#: for a line on stdin (the parent reads its mappings at the floor), then one of reference steps.
_FLOOR = r"""
import json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
steps = [("python alone", rss())]
if sys.argv[1] == "nvml":
    import pynvml
    pynvml.nvmlInit()
    pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    steps.append(("+ NVML initialised, one memory read", rss()))
import fastapi, uvicorn, pydantic
steps.append(("+ fastapi, uvicorn, pydantic imported", rss()))
import prometheus_client
steps.append(("+ prometheus_client imported", rss()))
print(json.dumps(steps), flush=True)
sys.stdin.readline()
import exporter.cli
steps = [("(reference: + gpu-exporter's start-up imports)", rss())]
if sys.argv[1] == "nvml":
    config = exporter.cli.parse_config(["--source", "nvml", *sys.argv[2:]], {})
    source = exporter.cli.build_source(config)
    source.start()
    for _ in range(3):
        source.collect(config.collect_groups())
    steps.append(("(reference: + its NVML source started, 3 collections)", rss()))
print(json.dumps(steps), flush=True)
sys.stdin.readline()
if sys.argv[1] == "nvml":
    source.close()
"""


Steps = list[tuple[str, float]]


def measure_floor(nvml: bool, flags: list[str]) -> tuple[Steps, Steps, dict[str, Steps]]:
    """The floor steps and the reference steps (label, cumulative MiB), from one fresh
    interpreter, and its resident memory by mapping at the floor and after the references."""
    proc = subprocess.Popen([sys.executable, "-c", _FLOOR, "nvml" if nvml else "none", *flags],
                            cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        steps, maps = [], {}
        for name in ("floor", "reference"):
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"the floor interpreter failed (exit {proc.wait(30)})")
            steps.append([(label, float(value)) for label, value in json.loads(line)])
            maps[name] = breakdown(proc.pid)
            proc.stdin.write("\n")
            proc.stdin.flush()
        if proc.wait(120) != 0:
            raise SystemExit(f"the floor interpreter failed (exit {proc.returncode})")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return steps[0], steps[1], maps


def breakdown(pid: int) -> list[tuple[str, float]]:
    """Resident MiB of a process by kind of mapping (from /proc/<pid>/smaps), largest first."""
    sizes: dict[str, float] = {}
    kind = "other"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        first = line.split(maxsplit=6)
        if "-" in first[0] and len(first) >= 5 and ":" in first[3]:  # a mapping's header line
            path = first[5] if len(first) > 5 else ""
            name = path.rsplit("/", 1)[-1]
            if not path or path.startswith("[anon") or path == "[heap]":
                kind = "heap and anonymous (Python objects, malloc)"
            elif "nvidia-ml" in name:
                kind = "libnvidia-ml (NVML)"
            elif name.startswith("libpython") or name.startswith("python"):
                kind = "the Python interpreter"
            elif ".so" in name:
                kind = "other shared libraries and extension modules"
            else:
                kind = "other (files, stacks, vdso)"
        elif line.startswith("Rss:"):
            sizes[kind] = sizes.get(kind, 0.0) + int(line.split()[1]) / 1024
    return sorted(sizes.items(), key=lambda item: -item[1])


@contextlib.contextmanager
def cuda_processes(count: int) -> Iterator[list[int]]:
    """``count`` torch processes holding 1 GiB each on GPU 0, one busy (GPU machine only)."""
    loads = [subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "gpu" / "cuda_load.py"), "--gpu", "0",
         "--gib", "1", "--seconds", "600", *(["--busy"] if i == 0 else [])],
        stdout=subprocess.PIPE, text=True) for i in range(count)]
    try:
        for proc in loads:
            assert proc.stdout is not None
            if not proc.stdout.readline().startswith("ready"):
                raise SystemExit("a CUDA load did not start")
        yield [proc.pid for proc in loads]
    finally:
        for proc in loads:
            proc.kill()
            proc.wait(30)


def scrape_exporter(args: argparse.Namespace) -> dict[str, object]:
    """Start the exporter, scrape it, and record RSS along the way."""
    source = (["--source", "nvml"] if args.nvml
              else ["--source", "simulated", "--scenario", args.scenario])
    extra = [*(["--collector.min-interval", "0"] if args.fresh else []), *args.flags]
    checkpoints: list[tuple[int, float]] = []
    with Server.exporter(*source, *extra) as server, Scraper(server.port) as client:
        for _ in range(args.warmup):
            client.get()
        after_warmup = rss_mb(server.pid)[0]
        step = max(1, args.scrapes // CHECKPOINTS)
        errors = 0
        start = time.perf_counter()
        for n in range(1, args.scrapes + 1):
            status, _, _ = client.get()
            errors += status != 200
            if n % step == 0 or n == args.scrapes:
                checkpoints.append((n, rss_mb(server.pid)[0]))
        elapsed = time.perf_counter() - start
        rss, peak = rss_mb(server.pid)
        parts = breakdown(server.pid)
    return {"breakdown": parts, "source": " ".join(source + extra), "after_warmup_mb": after_warmup,
            "checkpoints": checkpoints, "rss_mb": rss, "peak_mb": peak, "errors": errors,
            "seconds": elapsed, "scrapes": args.scrapes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scrapes", type=int, default=100_000, help="scrapes (100000)")
    parser.add_argument("--warmup", type=int, default=500, help="scrapes before the first RSS")
    parser.add_argument("--nvml", action="store_true", help="the real GPUs instead of simulated")
    parser.add_argument("--scenario", default="synthetic:8x32", help="simulated scenario")
    parser.add_argument("--cuda-processes", type=int, default=0,
                        help="torch processes to start on GPU 0 first (GPU machine; 0)")
    parser.add_argument("--fresh", action="store_true", help="a new collection every scrape")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("flags", nargs="*", metavar="-- FLAG",
                        help="exporter flags after --, also used by the reference collections")
    args = parser.parse_args(argv)
    if not 10 <= args.scrapes <= 1_000_000:
        parser.error("--scrapes must be 10..1000000")

    with cuda_processes(args.cuda_processes) as pids:
        if pids:
            print(f"CUDA processes on GPU 0: {pids}")
        # The floor in the same conditions: the references then read the same processes.
        floor_steps, reference_steps, floor_maps = measure_floor(args.nvml, args.flags)
        floor = floor_steps[-1][1]
        print("memory floor (each step cumulative, fresh interpreter):")
        previous = 0.0
        for label, value in floor_steps + reference_steps:
            delta = f"+{value - previous:5.1f}" if previous else "      "
            print(f"  {label:<54} {value:6.1f} MB {delta}")
            previous = value
        result = scrape_exporter(args)
    checkpoints: list[tuple[int, float]] = result["checkpoints"]  # type: ignore[assignment]
    rss, peak = float(result["rss_mb"]), float(result["peak_mb"])  # type: ignore[arg-type]
    print(f"\nexporter: {result['source']}, {args.scrapes} scrapes in "
          f"{result['seconds']:.1f} s ({result['errors']} non-200)")
    print(f"  after {args.warmup} warm-up scrapes   {result['after_warmup_mb']:6.1f} MB")
    for n, value in checkpoints:
        print(f"  after {n:>7} scrapes          {value:6.1f} MB")
    growth = checkpoints[-1][1] - checkpoints[min(1, len(checkpoints) - 1)][1]
    print(f"  peak (VmHWM)                   {peak:6.1f} MB")
    print(f"  over the floor                 {rss - floor:+6.1f} MB")
    print(f"  growth after the first tenth   {growth:+6.1f} MB")
    print("\nresident memory by mapping, MB: the floor; the floor interpreter after the "
          "references;\nthe exporter at the end; the exporter over the floor")
    maps = [dict(floor_maps["floor"]), dict(floor_maps["reference"]),
            dict(result["breakdown"])]  # type: ignore[call-overload]
    for kind in sorted(set().union(*maps), key=lambda k: -maps[2].get(k, 0.0)):
        floor_mb, reference_mb, exporter_mb = (m.get(kind, 0.0) for m in maps)
        print(f"  {kind:<48} {floor_mb:6.1f} {reference_mb:6.1f} {exporter_mb:6.1f} "
              f"{exporter_mb - floor_mb:+6.1f}")
    verdicts = [("flat (growth <= 1 MB)", growth <= TARGET_GROWTH_MB),
                ("no failed scrapes", result["errors"] == 0)]
    if args.nvml:
        verdicts.append((f"within {TARGET_OVER_FLOOR_MB:g} MB of the floor",
                         rss - floor <= TARGET_OVER_FLOOR_MB))
    else:
        verdicts.append((f"at most {TARGET_SIMULATED_MB:g} MB", rss <= TARGET_SIMULATED_MB))
    for label, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}: {label}")
    if args.json:
        args.json.write_text(json.dumps({"floor": floor_steps, "reference": reference_steps,
                                              "floor_breakdown": floor_maps, **result}, indent=2))
    return 0 if all(ok for _, ok in verdicts) or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
