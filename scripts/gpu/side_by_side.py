"""gpu-exporter, nvitop-exporter and raw pynvml on the same GPUs and processes, in one run.

Usage (on the GPU machine, from the repository root, as root; about 2 minutes):

    python3 scripts/gpu/side_by_side.py [--scrapes 300] [--collections 200] [--json FILE]

nvitop-exporter is imported if installed; otherwise its wheels are installed from ``.whl/``
into a temporary folder: nvitop==1.7.2 and nvitop-exporter==1.7.2, both py3-none-any
wheels; their other requirements (nvidia-ml-py < 13.616, psutil, prometheus-client) are already
on the GPU machine. The script:

1. starts two torch processes per GPU (scripts/gpu/cuda_load.py: one busy 6 GiB, one idle
   3 GiB), so every exporter sees the same processes;
2. starts three servers on 127.0.0.1: gpu-exporter with its defaults, gpu-exporter with
   ``--collector.min-interval 0`` (a new collection for every scrape: what a Prometheus
   scraping every 15 s gets) and nvitop-exporter (``--interval 1``, its default), and waits until
   each one lists the processes;
3. scrapes them in turns (one keep-alive connection each, Prometheus' headers: OpenMetrics,
   gzip), ``--scrapes`` rounds: client-side latency median and p99, CPU seconds each server
   used over the same window divided by its scrapes (nvitop-exporter's includes its background
   loop, as it would in production), and RSS at the end;
4. times one collection, in this process, interleaved: raw pynvml calls of gpu-exporter's
   default fields (the floor), gpu-exporter's NVML source, and nvitop-exporter's update of
   every device (which also reads PCIe and NVLink throughput, encoder/decoder utilisation and
   per-process host data; its NVML field set is larger, so its ratio says what that costs).

Prints one table with ratios (gpu-exporter / nvitop-exporter for the servers, each collection /
the raw floor) and PASS/FAIL lines; writes JSON to ``--json`` or ``$OUT/side_by_side.json``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    Scraper,
    Server,
    cpu_seconds,
    percentile,
    rss_mb,
)
from tests.processes import free_port  # noqa: E402

LOAD = ROOT / "scripts" / "gpu" / "cuda_load.py"
NVITOP_WHEELS = ("nvitop-1.7.2-py3-none-any.whl", "nvitop_exporter-1.7.2-py3-none-any.whl")
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}  {detail}", flush=True)


def nvitop_path() -> str | None:
    """Make nvitop-exporter importable; returns a folder to put on PYTHONPATH (or None)."""
    if importlib.util.find_spec("nvitop_exporter") is not None:
        return None
    wheels = [ROOT / ".whl" / name for name in NVITOP_WHEELS]
    missing = [str(w) for w in wheels if not w.exists()]
    if missing:
        raise SystemExit(f"nvitop-exporter is not installed and {missing} are missing")
    target = tempfile.mkdtemp(prefix="nvitop-")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", target, *map(str, wheels)], check=True, timeout=120)
    sys.path.insert(0, target)
    return target


def start_loads(gpus: int, busy_gib: float, idle_gib: float) -> list[subprocess.Popen[str]]:
    loads = []
    for gpu in range(gpus):
        for busy, gib in ((True, busy_gib), (False, idle_gib)):
            command = [sys.executable, str(LOAD), "--gpu", str(gpu), "--gib", str(gib),
                       "--seconds", "600", *(["--busy"] if busy else [])]
            loads.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    for proc in loads:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("ready"):
            raise SystemExit(f"a CUDA load did not start: {line!r}")
    return loads


def wait_for_pids(server: Server, pids: list[int], timeout: float = 30) -> bool:
    """True once every pid appears in the server's /metrics (plain text)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Scraper(server.port) as client:
            body = client.get("/metrics", {})[2].decode()
        if all(f'pid="{pid}"' in body for pid in pids):
            return True
        time.sleep(0.5)
    return False


def scrape_rounds(servers: dict[str, Server], rounds: int) -> dict[str, dict[str, float]]:
    """Scrape each server once per round, in turns; latency, CPU per scrape, RSS."""
    clients = {name: Scraper(s.port) for name, s in servers.items()}
    latency: dict[str, list[float]] = {name: [] for name in servers}
    sizes: dict[str, int] = {}
    for _ in range(20):  # warm-up
        for client in clients.values():
            client.get()
    cpu_before = {name: cpu_seconds(s.pid) for name, s in servers.items()}
    begin = time.perf_counter()
    for _ in range(rounds):
        for name, client in clients.items():
            start = time.perf_counter()
            status, headers, body = client.get()
            latency[name].append((time.perf_counter() - start) * 1e3)
            if status != 200:
                raise SystemExit(f"{name}: /metrics answered {status}")
            if headers.get("content-encoding") == "gzip":
                sizes[name] = len(gzip.decompress(body))
    window = time.perf_counter() - begin
    out = {}
    for name, server in servers.items():
        clients[name].close()
        cpu = cpu_seconds(server.pid) - cpu_before[name]
        rss, peak = rss_mb(server.pid)
        out[name] = {"p50_ms": statistics.median(latency[name]),
                     "p99_ms": percentile(latency[name], 99),
                     "cpu_ms_per_scrape": cpu / rounds * 1e3, "rss_mb": rss, "peak_mb": peak,
                     "body_bytes_uncompressed": sizes.get(name, 0), "window_s": window}
    return out


def raw_collector() -> Callable[[], object]:
    """pynvml calls of gpu-exporter's default fields for every GPU, nothing around them."""
    import pynvml  # noqa: PLC0415 - GPU machine only

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    last_seen = [0] * len(handles)

    def supported(fn: Callable[..., object], *args: object) -> bool:
        try:
            fn(*args)
        except pynvml.NVMLError_NotSupported:
            return False
        return True

    ecc = supported(pynvml.nvmlDeviceGetTotalEccErrors, handles[0], 0, 0)
    fan = supported(pynvml.nvmlDeviceGetFanSpeed, handles[0])

    def collect() -> object:
        rows = []
        for i, h in enumerate(handles):
            row: list[Any] = [
                pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
                pynvml.nvmlDeviceGetUtilizationRates(h),
                pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
                pynvml.nvmlDeviceGetPowerUsage(h), pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_GRAPHICS),
                pynvml.nvmlDeviceGetPerformanceState(h),
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            ]
            if ecc:
                row += [pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0),
                        pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0)]
            if fan:
                row.append(pynvml.nvmlDeviceGetFanSpeed(h))
            compute = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)
            graphics = pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(h)
            if compute or graphics:
                try:
                    samples = pynvml.nvmlDeviceGetProcessUtilization(h, last_seen[i])
                    last_seen[i] = max([last_seen[i], *(s.timeStamp for s in samples)])
                except pynvml.NVMLError_NotFound:
                    pass
            rows.append((row, compute, graphics))
        return rows

    return collect


def gpu_exporter_collector() -> Callable[[], object]:
    """gpu-exporter's NVML source reading its default fields."""
    from exporter.catalogue.metrics import default_groups  # noqa: PLC0415
    from exporter.sources.nvml.source import NvmlSource  # noqa: PLC0415

    source = NvmlSource(hostname="side-by-side")
    source.start()
    groups = default_groups()
    return lambda: source.collect(groups)


def nvitop_collector() -> Callable[[], object]:
    """nvitop-exporter's per-interval update of every device (without the host part)."""
    from nvitop import Device  # noqa: PLC0415
    from nvitop_exporter.exporter import PrometheusExporter  # noqa: PLC0415
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    devices = Device.from_indices(range(Device.count()))
    exporter = PrometheusExporter(devices, hostname="side-by-side", registry=CollectorRegistry())

    def collect() -> object:
        for device in devices:
            exporter.update_device(device)
        return None

    return collect


def time_collections(collections: int) -> dict[str, dict[str, float]]:
    """Interleaved timings (ms) of the three collectors, so each sees the same GPU state."""
    collectors = {"raw pynvml": raw_collector(), "gpu-exporter source": gpu_exporter_collector(),
                  "nvitop-exporter update": nvitop_collector()}
    for _ in range(10):
        for fn in collectors.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in collectors}
    for _ in range(collections):
        for name, fn in collectors.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: {"p50_ms": statistics.median(s), "p99_ms": percentile(s, 99)}
            for name, s in samples.items()}


def report(servers: dict[str, dict[str, float]], collections: dict[str, dict[str, float]],
           ) -> None:
    nvitop = servers["nvitop-exporter"]
    print("\nscrapes (same window, in turns; ratio = this / nvitop-exporter)")
    print(f"{'server':<28} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/scrape':>14} {'RSS MB':>7} "
          f"{'ratio p50':>9} {'ratio p99':>9} {'ratio CPU':>9} {'ratio RSS':>9}")
    for name, r in servers.items():
        print(f"{name:<28} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['cpu_ms_per_scrape']:>14.3f} {r['rss_mb']:>7.1f} "
              f"{r['p50_ms'] / nvitop['p50_ms']:>9.2f} {r['p99_ms'] / nvitop['p99_ms']:>9.2f} "
              f"{r['cpu_ms_per_scrape'] / nvitop['cpu_ms_per_scrape']:>9.2f} "
              f"{r['rss_mb'] / nvitop['rss_mb']:>9.2f}")
    floor = collections["raw pynvml"]
    print("\none collection of every GPU, in this process (ratio = this / raw pynvml)")
    print(f"{'collector':<28} {'p50 ms':>8} {'p99 ms':>8} {'ratio p50':>9} {'ratio p99':>9}")
    for name, r in collections.items():
        print(f"{name:<28} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} "
              f"{r['p50_ms'] / floor['p50_ms']:>9.2f} {r['p99_ms'] / floor['p99_ms']:>9.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scrapes", type=int, default=300, help="rounds of scrapes (300)")
    parser.add_argument("--collections", type=int, default=200, help="timed collections (200)")
    parser.add_argument("--busy-gib", type=float, default=6.0)
    parser.add_argument("--idle-gib", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    extra_path = nvitop_path()
    inherited = os.environ.get("PYTHONPATH", "")  # the GPU machine's wheels live there
    env = {"PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(ROOT), inherited) if p)}
    import pynvml  # noqa: PLC0415

    pynvml.nvmlInit()
    gpus = pynvml.nvmlDeviceGetCount()
    loads = start_loads(gpus, args.busy_gib, args.idle_gib)
    pids = [proc.pid for proc in loads]
    print(f"{gpus} GPU(s), CUDA processes {pids}", flush=True)
    servers: dict[str, Server] = {}
    try:
        servers["gpu-exporter (default)"] = Server.exporter("--source", "nvml", env=env)
        servers["gpu-exporter (fresh)"] = Server.exporter(
            "--source", "nvml", "--collector.min-interval", "0", env=env)
        port = free_port()
        servers["nvitop-exporter"] = Server(
            [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1", "--port",
             str(port), "--hostname", "side-by-side", "--interval", "1"],
            port=port, ready_path="/metrics", env=env)
        for name, server in servers.items():
            check(f"{name} lists the CUDA processes", wait_for_pids(server, pids))
        scrapes = scrape_rounds(servers, args.scrapes)
        collections = time_collections(args.collections)
    finally:
        for server in servers.values():
            server.stop()
        for proc in loads:
            proc.kill()
            proc.wait(30)
    report(scrapes, collections)
    ours, theirs = scrapes["gpu-exporter (default)"], scrapes["nvitop-exporter"]
    check("gpu-exporter scrape p50 <= nvitop-exporter's", ours["p50_ms"] <= theirs["p50_ms"])
    check("gpu-exporter CPU per scrape <= nvitop-exporter's",
          ours["cpu_ms_per_scrape"] <= theirs["cpu_ms_per_scrape"])
    check("gpu-exporter RSS <= nvitop-exporter's", ours["rss_mb"] <= theirs["rss_mb"],
          f"{ours['rss_mb']:.1f} vs {theirs['rss_mb']:.1f} MB")
    source = collections["gpu-exporter source"]["p50_ms"]
    check("gpu-exporter collection within 2x of raw pynvml (p50)",
          source <= 2 * collections["raw pynvml"]["p50_ms"])
    out = args.json or (Path(os.environ["OUT"]) / "side_by_side.json"
                        if os.environ.get("OUT") else None)
    if out is not None:
        out.write_text(json.dumps({"gpus": gpus, "scrapes": scrapes, "collections": collections,
                                   "checks": RESULTS}, indent=2))
    failed = [name for name, ok, _ in RESULTS if not ok]
    print("VERDICT:", "PASS" if not failed else f"FAIL ({', '.join(failed)})", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
