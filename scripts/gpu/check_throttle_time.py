"""Throttle time on a real GPU: what each NVML call costs, and the exporter's counters moving
under a matrix-product load (run as root on the GPU machine; nothing on the device is changed).

    python3 scripts/gpu/check_throttle_time.py [--gpu 0] [--port 9479] [--load-seconds 40]
                                               [--iterations 300] [--json OUT]

1. Costs, averaged over ``--iterations`` calls on one GPU: one ``nvmlDeviceGetFieldValues`` of
   the eleven throttle-time fields (what the exporter makes), one
   ``nvmlDeviceGetViolationStatus`` per perf policy (the fallback), and what the
   ``throttle_time`` group adds to ``NvmlSource.collect`` of the default groups.
2. ``python3 -m exporter --source nvml --collector.throttle_time --collector.nvlink`` on
   127.0.0.1, scraped before, during and after an fp16 16384x16384 matrix-product loop
   (scripts/gpu/cuda_load.py, ``--load-seconds``): ``sw_power_cap`` time grows by a large
   share of the load time and as much as the raw violation counter; no counter goes down;
   ``low_utilization`` stops growing under load; NVLink series only where the GPU reports
   links; the OpenMetrics scrape dates the counters to the host's boot (``_created``).

Prints a PASS/FAIL table; exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import pynvml  # noqa: E402
from prometheus_client.openmetrics.parser import text_string_to_metric_families  # noqa: E402

from exporter.catalogue import metrics  # noqa: E402
from exporter.catalogue.metrics import Group, default_groups  # noqa: E402
from exporter.sources.nvml.source import NvmlSource  # noqa: E402
from scripts.gpu.probes import scrape, stop, wait_ready  # noqa: E402
from scripts.gpu.results import check, save  # noqa: E402

LOAD = ROOT / "scripts" / "gpu" / "cuda_load.py"
TIME = metrics.THROTTLE_TIME.name
FIELDS = [read.fields[0].id for read in metrics.THROTTLE_TIME_READS]
POLICIES = {read.label: read.policy.value for read in metrics.THROTTLE_TIME_READS
            if read.policy is not None}
OM = "application/openmetrics-text; version=1.0.0"
#: The NVLink rows' sample names (GPM's NVLink traffic is another group's).
LINK_SERIES = {row.name for row in (metrics.NVLINK_CRC_FLIT_ERRORS, metrics.NVLINK_CRC_DATA_ERRORS,
                                    metrics.NVLINK_REPLAY_ERRORS, metrics.NVLINK_RECOVERY_ERRORS,
                                    metrics.NVLINK_STATE)}


def _microseconds(call: Any, iterations: int) -> float:
    """Median microseconds of ``call()`` (after two warm-up calls)."""
    call()
    call()
    times = []
    for _ in range(iterations):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


def costs(gpu: int, iterations: int) -> dict[str, Any]:
    """What each call costs on this GPU, and what the group adds to a collection."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    found: dict[str, Any] = {
        "field_values_11": _microseconds(
            lambda: pynvml.nvmlDeviceGetFieldValues(handle, FIELDS), iterations),
        "field_values_1": _microseconds(
            lambda: pynvml.nvmlDeviceGetFieldValues(handle, FIELDS[:1]), iterations),
        "violation_status": {
            reason: _microseconds(lambda p=policy: pynvml.nvmlDeviceGetViolationStatus(handle, p),
                                  iterations) for reason, policy in POLICIES.items()},
        "field_alone": {
            str(field): _microseconds(lambda f=field: pynvml.nvmlDeviceGetFieldValues(handle, [f]),
                                      max(iterations // 3, 10)) for field in FIELDS},
    }
    answers = pynvml.nvmlDeviceGetFieldValues(handle, [*FIELDS, 91, (165, 0), (163, 0)])
    found["answers"] = {int(a.fieldId): int(a.nvmlReturn) for a in answers}
    source = NvmlSource(hostname="check", nvml=pynvml, watch_events=False)
    source.start()
    try:
        plain = default_groups()
        more = plain | {Group.THROTTLE_TIME}
        found["collect_default"] = _microseconds(lambda: source.collect(plain), iterations // 3)
        found["collect_with_throttle_time"] = _microseconds(lambda: source.collect(more),
                                                            iterations // 3)
    finally:
        source.close()
    found["gpus"] = pynvml.nvmlDeviceGetCount()
    return found


def _times(samples: dict[str, list[Any]], uuid: str) -> dict[str, float]:
    return {s.labels["reason"]: s.value for s in samples.get(TIME, [])
            if s.labels.get("uuid") == uuid}


def _violation(handle: Any) -> float:
    return pynvml.nvmlDeviceGetViolationStatus(handle, POLICIES["sw_power_cap"]).violationTime / 1e9


def under_load(args: argparse.Namespace, uuid: str) -> dict[str, Any]:
    """The exporter's counters before, during and after the load."""
    base = f"http://127.0.0.1:{args.port}"
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    exporter = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--source", "nvml", "--web.listen-address",
         f"127.0.0.1:{args.port}", "--collector.throttle_time", "--collector.nvlink",
         "--collector.min-interval", "500ms"], cwd=ROOT)
    found: dict[str, Any] = {}
    load = None
    try:
        if not check("exporter ready", wait_ready(base, exporter)):
            return found
        before = _times(scrape(base), uuid)
        raw_before = _violation(handle)
        time.sleep(3.0)
        idle = _times(scrape(base), uuid)
        load = subprocess.Popen(
            [sys.executable, str(LOAD), "--gpu", str(args.gpu), "--gib", "8", "--kind", "fp16",
             "--size", "16384", "--seconds", str(args.load_seconds + 30)],
            stdout=subprocess.PIPE, text=True)
        assert load.stdout is not None
        ready = load.stdout.readline()
        check("load started", ready.startswith("ready"), ready.strip())
        began = time.monotonic()
        start = _times(scrape(base), uuid)
        raw_start = _violation(handle)
        time.sleep(args.load_seconds / 2)
        middle = scrape(base)
        active = {s.labels["reason"]: s.value for s in middle.get(metrics.THROTTLE_ACTIVE.name, [])
                  if s.labels.get("uuid") == uuid}
        time.sleep(max(0.0, args.load_seconds - (time.monotonic() - began)))
        end = _times(scrape(base), uuid)
        raw_end = _violation(handle)
        seconds = time.monotonic() - began
        created = {}
        request = urllib.request.Request(base + "/metrics", headers={"Accept": OM})
        with urllib.request.urlopen(request, timeout=10) as answer:
            for family in text_string_to_metric_families(answer.read().decode()):
                for sample in family.samples:
                    if sample.name == TIME.removesuffix("_total") + "_created":
                        created[sample.labels["reason"]] = sample.value
        found.update(before=before, idle=idle, start=start, end=end, load_seconds=seconds,
                     active_mid_load=active, raw_power_violation=(raw_before, raw_start, raw_end),
                     created=created, boot=psutil.boot_time(),
                     nvlink_series=sorted(set(scrape(base)) & LINK_SERIES))
    finally:
        if load is not None:
            load.kill()
            load.wait(30)
        stop(exporter)
    return found


def judge(cost: dict[str, Any], load: dict[str, Any]) -> None:
    check("one field-value call reads the eleven fields",
          all(code == 0 for field, code in cost["answers"].items() if field in FIELDS),
          f"{cost['field_values_11']:.0f} us for 11 fields, {cost['field_values_1']:.0f} us "
          f"for 1; violation status {min(cost['violation_status'].values()):.0f}-"
          f"{max(cost['violation_status'].values()):.0f} us per policy")
    added = cost["collect_with_throttle_time"] - cost["collect_default"]
    policies = sum(cost["violation_status"].values())
    alone = ", ".join(f"{field}: {us:.0f}" for field, us in cost["field_alone"].items())
    check("the one call costs less than the violation-status calls it replaces",
          cost["field_values_11"] < policies,
          f"{cost['field_values_11']:.0f} us against {policies:.0f} us for the 8 policies; "
          f"each field alone (us): {alone}")
    check("what throttle_time adds to a collection is that call", added < 2 * cost[
        "field_values_11"] * cost["gpus"] + 200,
          f"{cost['collect_default']:.0f} -> {cost['collect_with_throttle_time']:.0f} us "
          f"({cost['gpus']} GPU): +{added:.0f} us")
    if not load:
        return
    start, end, seconds = load["start"], load["end"], load["load_seconds"]
    check("every reason is counted", set(end) == set(metrics.THROTTLE_TIME_REASONS),
          ", ".join(sorted(set(metrics.THROTTLE_TIME_REASONS) - set(end))) or "all 11")
    check("no counter goes down", all(end[r] >= start.get(r, 0) >= load["before"].get(r, 0)
                                      for r in end))
    grew = end["sw_power_cap"] - start["sw_power_cap"]
    check("sw_power_cap time moves under the load", grew > 0.3 * seconds,
          f"+{grew:.1f} s in {seconds:.1f} s of fp16 16384^2 products; gauge mid-load: "
          f"{load['active_mid_load'].get('sw_power_cap')}")
    raw = load["raw_power_violation"][2] - load["raw_power_violation"][1]
    check("it moves as much as the raw violation counter", abs(raw - grew) < 3.0,
          f"exporter +{grew:.1f} s, nvmlDeviceGetViolationStatus +{raw:.1f} s")
    idle_growth = load["idle"]["low_utilization"] - load["before"]["low_utilization"]
    busy_growth = end["low_utilization"] - start["low_utilization"]
    check("low_utilization grows while idle and stops under load",
          busy_growth < 0.2 * seconds,
          f"idle 3 s: +{idle_growth:.1f} s; under load: +{busy_growth:.1f} s")
    check("no NVLink series on a GPU without links", not load["nvlink_series"],
          ", ".join(load["nvlink_series"]) or "none")
    created = set(load["created"].values())
    check("OpenMetrics dates the counters to the boot (_created)",
          created == {load["boot"]}, f"{created} vs boot {load['boot']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--port", type=int, default=9479)
    parser.add_argument("--load-seconds", type=float, default=40.0)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out = args.json or (Path(os.environ["OUT"]) / "throttle_time.json"
                        if os.environ.get("OUT") else None)
    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(args.gpu))
        cost = costs(args.gpu, args.iterations)
        load = under_load(args, uuid)
        judge(cost, load)
    finally:
        pynvml.nvmlShutdown()
    return 0 if save({"costs": cost, "load": load}, out) else 1


if __name__ == "__main__":
    raise SystemExit(main())
