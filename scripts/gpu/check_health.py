"""GPU health paths on real GPUs: the XID event waiter, memory-health reads, MIG mode. Read-only.

Usage (on the GPU machine, from the repository root; no extra packages needed):
    python3 scripts/gpu/check_health.py [--iterations 2000] [--wait-ms 500] [--json OUT.json]

Never changes a GPU mode (MIG, ECC, persistence, clocks) and never provokes an XID: what it
proves about XID delivery is that the waiter registers and waits on the real driver; counting
delivered XIDs is proven against the fake NVML (tests/sources/test_nvml_events.py).

Checks, each printed as a PASS/FAIL line:
1. events: per GPU the supported event mask; the waiter registers XID (and the other health
   events) on every GPU that supports them, one thread per GPU, no error.
2. scrape cost: ``NvmlSource.collect`` timed in alternating blocks with the waiter running and
   stopped (p50/p95 per collection); PASS when the waiter adds less than 5 % + 5 us to the p50.
   Also the cost of ``EventWaiter.counts()`` (what a scrape adds) and of the memory-health reads.
3. SIGTERM: a child process runs the waiter and stops it from its SIGTERM handler; PASS when
   the child exits 0 within one wait timeout + 1 s of the signal (time printed).
4. memory health: remapped rows, retired pages, lifetime (aggregate) ECC per GPU; PASS when the
   remap and ECC fields read (Ampere+ with ECC on; retired pages are expected NOT_SUPPORTED on
   Hopper and only printed).
5. MIG: the reader's view agrees with ``nvmlDeviceGetMigMode``; on a MIG-off GPU it reads no
   instances.
6. ``--exporter``: the real exporter (``python3 -m exporter --source nvml``, fresh collection per
   scrape) with the ``xid`` group on and off: scrape p50/p95 side by side, the XID series it
   exposes, and the time from SIGTERM to exit (needs fastapi/uvicorn).
Results go to ``--json`` and, when ``$OUT`` is set, to ``$OUT/check_health.json``.
Exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from exporter.sources.nvml.events import EventWaiter  # noqa: E402

RESULTS: list[dict[str, Any]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append({"check": name, "ok": ok, "detail": detail})
    print(f"[{'PASS' if ok else 'FAIL'}] {name}  {detail}", flush=True)
    return ok


def load_nvml(fake: bool) -> ModuleType:
    """pynvml, or (``--fake``, for testing this script without a GPU) the test fake."""
    if not fake:
        import pynvml  # noqa: PLC0415 - only where it is installed

        return pynvml
    from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health  # noqa: PLC0415

    return FakeHealthNvml([h200_health(0)])


def durations(call: Callable[[], object], count: int) -> list[float]:
    """How long each of ``count`` calls of ``call`` took, in seconds."""
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return samples


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_us": statistics.median(ordered) * 1e6,
            "p95_us": ordered[int(0.95 * (len(ordered) - 1))] * 1e6}


# --- 1. events ----------------------------------------------------------------------------------
def check_events(nvml: ModuleType, wait_ms: int) -> dict[str, Any]:
    nvml.nvmlInit()
    try:
        masks = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                masks[index] = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            except nvml.NVMLError as exc:
                masks[index] = -1
                print(f"  GPU {index}: nvmlDeviceGetSupportedEventTypes: {exc}")
    finally:
        nvml.nvmlShutdown()
    waiter = EventWaiter(nvml, wait_ms=wait_ms)
    began = time.perf_counter()
    waiter.start()
    start_s = time.perf_counter() - began
    time.sleep(2 * wait_ms / 1000)  # a couple of wait timeouts: the threads must survive them
    counts = waiter.counts()
    gpus = {}
    for index, gpu in sorted(counts.gpus.items()):
        supported = masks.get(index, -1)
        gpus[index] = {"uuid": gpu.uuid, "supported_mask": hex(supported) if supported >= 0
                       else None, "registered": gpu.registered, "watched": list(gpu.watched),
                       "error": gpu.error, "xids": {str(k.xid): s.count
                                                    for k, s in gpu.xids.items()},
                       "events": dict(gpu.events)}
        print(f"  GPU {index} {gpu.uuid}: supported {gpus[index]['supported_mask']}, "
              f"registered={gpu.registered}, watching {', '.join(gpu.watched) or '-'}"
              f"{'' if gpu.error is None else ', error ' + gpu.error}")
    threads = sorted(t.name for t in __import__("threading").enumerate()
                     if t.name.startswith("xid-waiter-"))
    stop_s = waiter.stop()
    ok = bool(gpus) and all(g["registered"] and g["error"] is None for g in gpus.values())
    check("events: XID waiter registered on every GPU", ok,
          f"{len(gpus)} GPU(s), threads {threads}, start {start_s * 1e3:.1f} ms, "
          f"stop {stop_s * 1e3:.1f} ms")
    check("events: one waiter thread per registered GPU",
          len(threads) == sum(1 for g in gpus.values() if g["registered"]), str(threads))
    return {"gpus": gpus, "start_ms": start_s * 1e3, "stop_ms": stop_s * 1e3,
            "threads": threads}


# --- 2. scrape cost -----------------------------------------------------------------------------
def _timed_block(nvml: ModuleType, watch_events: bool, groups: frozenset[Any], count: int,
                 wait_ms: int) -> list[float]:
    """``count`` collections of a fresh NvmlSource (its waiter on or off), timed each."""
    from exporter.sources.nvml.source import NvmlSource  # noqa: PLC0415

    source = NvmlSource(hostname="check", nvml=nvml, watch_events=watch_events,
                        event_wait_ms=wait_ms)
    source.start()
    try:
        for _ in range(10):  # warm-up
            source.collect(groups)
        return durations(lambda: source.collect(groups), count)
    finally:
        source.close()


def check_scrape_cost(nvml: ModuleType, iterations: int, wait_ms: int) -> dict[str, Any]:
    from exporter.catalogue.metrics import Group, default_groups  # noqa: PLC0415

    groups = default_groups()
    blocks = 10
    per_block = max(1, iterations // blocks)
    off: list[float] = []
    on: list[float] = []
    for block in range(blocks):  # alternating, so drift hits both alike
        watch = bool(block % 2)
        (on if watch else off).extend(_timed_block(nvml, watch, groups, per_block, wait_ms))
    waiter = EventWaiter(nvml, wait_ms=wait_ms)
    waiter.start()
    try:
        counts_cost = durations(waiter.counts, iterations)
    finally:
        waiter.stop()
    repair = frozenset({Group.REMAPPING})
    health_cost = percentiles(_timed_block(nvml, False, repair, per_block, wait_ms))
    empty_cost = percentiles(_timed_block(nvml, False, frozenset(), per_block, wait_ms))
    result = {"waiter_off": percentiles(off), "waiter_on": percentiles(on),
              "counts_read": percentiles(counts_cost),
              "remapping_group_collect": health_cost, "empty_collect": empty_cost,
              "collections_each": len(off)}
    p50_off, p50_on = result["waiter_off"]["p50_us"], result["waiter_on"]["p50_us"]
    check("scrape cost: waiter adds nothing measurable to a collection",
          p50_on <= p50_off * 1.05 + 5.0,
          f"collect (default groups) p50 off {p50_off:.1f} us / on {p50_on:.1f} us (p95 "
          f"{result['waiter_off']['p95_us']:.1f} / {result['waiter_on']['p95_us']:.1f}); "
          f"counts() p50 {result['counts_read']['p50_us']:.2f} us; collect of the remapping "
          f"group alone p50 {health_cost['p50_us']:.1f} us vs no group "
          f"{empty_cost['p50_us']:.1f} us; {len(off)} collections each")
    return result


# --- 3. SIGTERM ---------------------------------------------------------------------------------
def child(nvml: ModuleType, wait_ms: int) -> int:
    """Run the waiter until SIGTERM; then stop it and print how long that took."""
    waiter = EventWaiter(nvml, wait_ms=wait_ms)

    def on_term(_signum: int, _frame: Any) -> None:
        took = waiter.stop()
        print(json.dumps({"stop_seconds": took,
                          "registered": [g.registered for g in waiter.counts().gpus.values()]}),
              flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    waiter.start()
    print("READY", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
    waiter.stop()
    return 3  # nobody sent SIGTERM


def check_sigterm(wait_ms: int, fake: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--wait-ms", str(wait_ms)]
    if fake:
        cmd.append("--fake")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    ready = proc.stdout.readline().strip()
    time.sleep(1.5 * wait_ms / 1000)  # let the threads sit in nvmlEventSetWait
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=wait_ms / 1000 + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    exit_s = time.monotonic() - sent
    report: dict[str, Any] = {}
    for line in proc.stdout.read().splitlines():
        if line.startswith("{"):
            report = json.loads(line)
    stop_s = report.get("stop_seconds")
    check("SIGTERM: waiter stops and the process exits promptly",
          ready == "READY" and rc == 0 and exit_s < wait_ms / 1000 + 1.0,
          f"ready={ready!r} rc={rc} exit {exit_s * 1e3:.0f} ms after SIGTERM, "
          f"stop() {'?' if stop_s is None else f'{stop_s * 1e3:.0f}'} ms "
          f"(wait timeout {wait_ms} ms)")
    return {"rc": rc, "exit_ms": exit_s * 1e3,
            "stop_ms": None if stop_s is None else stop_s * 1e3, "wait_ms": wait_ms}


# --- 4. memory health, 5. MIG -----------------------------------------------------------------
def check_memory_and_mig(nvml: ModuleType) -> dict[str, Any]:
    from exporter.catalogue import metrics  # noqa: PLC0415
    from exporter.catalogue.metrics import Group  # noqa: PLC0415
    from exporter.sources.nvml.source import NvmlSource  # noqa: PLC0415

    source = NvmlSource(hostname="check", nvml=nvml, watch_events=False)
    source.start()
    out: dict[str, Any] = {}
    try:
        snapshot = source.collect(frozenset({Group.REMAPPING, Group.ECC, Group.MIG}))
        unsupported = source.unsupported_fields()
        nvml.nvmlInit()
        try:
            for gpu in snapshot.gpus:
                index = gpu.identity.index
                values = {k: v for k, v in gpu.values.items()}
                print(f"  GPU {index}: {values}; unsupported: {sorted(unsupported.get(index, []))}")
                remap = gpu.labelled(metrics.REMAPPED_ROWS.name)
                lifetime = gpu.labelled(metrics.ECC_AGGREGATE.name)
                check(f"memory health GPU {index}: remapped rows and lifetime ECC read",
                      gpu.up and remap is not None and lifetime is not None
                      and gpu.value(metrics.REMAP_PENDING.name) is not None,
                      f"remapped={remap} pending={gpu.value(metrics.REMAP_PENDING.name)} "
                      f"failure={gpu.value(metrics.REMAP_FAILURE.name)} lifetime ECC={lifetime} "
                      f"retired pages={gpu.labelled(metrics.RETIRED_PAGES.name)}")
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    mode: list[Any] = list(nvml.nvmlDeviceGetMigMode(handle))
                except nvml.NVMLError as exc:
                    mode = [f"error: {exc}"]
                enabled = gpu.value(metrics.MIG_ENABLED.name)
                check(f"MIG GPU {index}: the source agrees with nvmlDeviceGetMigMode "
                      "(mode untouched)",
                      (enabled == 1.0) == (mode[:1] == [1]) and (gpu.mig is not None) == (
                          enabled == 1.0),
                      f"mode [current, pending]={mode}, gpu_mig_enabled={enabled}, instances "
                      f"read: {'none (MIG off)' if gpu.mig is None else len(gpu.mig)}")
                out[str(index)] = {"values": {k: v if isinstance(v, float | int) else dict(v)
                                              for k, v in values.items()},
                                   "unsupported": sorted(unsupported.get(index, [])),
                                   "mig_mode": mode,
                                   "mig_instances": None if gpu.mig is None else len(gpu.mig)}
        finally:
            nvml.nvmlShutdown()
    finally:
        source.close()
    return out


# --- 6. the real exporter -------------------------------------------------------------------------
def _scrape_run(extra: list[str], port: int, scrapes: int, fake: bool) -> dict[str, Any]:
    import urllib.request  # noqa: PLC0415

    module = "tests.e2e.fake_nvml_health_main" if fake else "exporter"
    cmd = [sys.executable, "-m", module, "--source", "nvml", "--web.listen-address",
           f"127.0.0.1:{port}", "--collector.min-interval", "0", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    body = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    body = response.read().decode()
                if "gpu_up" in body:
                    break
            except OSError:
                time.sleep(0.2)
        samples = []
        for _ in range(scrapes):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read().decode()
            samples.append(time.perf_counter() - t0)
    finally:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        exit_s = time.monotonic() - sent
    xid_lines = [line for line in body.splitlines()
                 if line.startswith(("gpu_xid_", "gpu_remapped_rows", "gpu_ecc_aggregate",
                                     "gpu_mig_"))]
    return {"cmd": cmd, "scrape": percentiles(samples) if samples else None, "rc": rc,
            "exit_ms": exit_s * 1e3, "health_lines": xid_lines,
            "stderr_tail": (proc.stderr.read() if proc.stderr else "")[-2000:]}


def check_exporter(scrapes: int, port: int, fake: bool) -> dict[str, Any]:
    try:
        import fastapi  # noqa: F401, PLC0415
        import uvicorn  # noqa: F401, PLC0415
    except ImportError as exc:
        check("exporter: runs (fastapi/uvicorn importable)", False, str(exc))
        return {}
    on = _scrape_run([], port, scrapes, fake)
    off = _scrape_run(["--no-collector.xid"], port + 1, scrapes, fake)
    for name, run in (("xid on", on), ("xid off", off)):
        print(f"  exporter {name}: scrape {run['scrape']}, SIGTERM -> exit rc={run['rc']} in "
              f"{run['exit_ms']:.0f} ms")
    print("  health series (xid on):\n    " + "\n    ".join(on["health_lines"][:40]))
    registered = [line for line in on["health_lines"]
                  if line.startswith("gpu_xid_events_registered")]
    check("exporter: XID events registered on every GPU (gpu_xid_events_registered 1)",
          bool(registered) and all(line.rstrip().endswith(" 1.0") or line.rstrip().endswith(" 1")
                                   for line in registered), "; ".join(registered))
    ok_scrape = on["scrape"] is not None and off["scrape"] is not None
    p50_on = on["scrape"]["p50_us"] if ok_scrape else float("nan")
    p50_off = off["scrape"]["p50_us"] if ok_scrape else float("nan")
    check("exporter: scrape with the waiter no slower than without (p50 within 5 % + 50 us)",
          ok_scrape and p50_on <= p50_off * 1.05 + 50,
          f"p50 on {p50_on:.0f} us / off {p50_off:.0f} us over {scrapes} fresh scrapes each")
    check("exporter: SIGTERM stops it cleanly and promptly (exit 0 within 2 s)",
          on["rc"] == 0 and on["exit_ms"] < 2000,
          f"xid on: rc {on['rc']} after {on['exit_ms']:.0f} ms; xid off: rc {off['rc']} after "
          f"{off['exit_ms']:.0f} ms")
    return {"xid_on": on, "xid_off": off}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--wait-ms", type=int, default=500)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--fake", action="store_true", help="use the test fake (no GPU)")
    parser.add_argument("--exporter", action="store_true",
                        help="also run the real exporter with the xid group on and off")
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--port", type=int, default=19477)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    nvml = load_nvml(args.fake)
    if args.child:
        return child(nvml, args.wait_ms)
    summary: dict[str, Any] = {
        "binding": getattr(nvml, "__file__", "?"),
        "events": check_events(nvml, args.wait_ms),
        "scrape_cost": check_scrape_cost(nvml, args.iterations, args.wait_ms),
        "sigterm": check_sigterm(args.wait_ms, args.fake),
        "memory_and_mig": check_memory_and_mig(nvml),
    }
    if args.exporter:
        summary["exporter"] = check_exporter(args.scrapes, args.port, args.fake)
    summary["results"] = RESULTS
    failed = [r["check"] for r in RESULTS if not r["ok"]]
    print(f"{len(RESULTS) - len(failed)}/{len(RESULTS)} PASS" + (f"; FAILED: {failed}"
                                                                 if failed else ""))
    text = json.dumps(summary, indent=2, default=str)
    if args.json:
        args.json.write_text(text)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "check_health.json").write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
