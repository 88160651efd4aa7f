"""End-to-end check of gpu-exporter on real GPUs (run as root on the GPU machine).

    python3 scripts/gpu/check_exporter.py [--port 9477] [--busy-gib 6] [--idle-gib 3]
                                          [--user gpucheck] [--json OUT.json]

Starts ``python3 -m exporter --source nvml`` on 127.0.0.1, creates a second Unix user, starts
torch processes (scripts/gpu/cuda_load.py): on one GPU a busy one as root and an idle one as
the other user; on N GPUs one per GPU, alternating user and busy/idle, sizes differing. Then it
scrapes /metrics and /api/v1/snapshot and compares with nvidia-smi: processes with user and
uid, per-process memory (MiB), GPU memory used/total, plausible temperature/power/utilisation,
busy > 0 and idle ~0 utilisation, per-user sums, every per-GPU metric row NVML reads exposed,
the jobstats group's minor numbers;
stops the processes and checks their series
vanish; times a collection and scrapes. Prints a PASS/FAIL table; exit status 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from exporter.catalogue import metrics  # noqa: E402
from exporter.catalogue.metrics import accounting  # noqa: E402
from scripts.gpu.probes import ensure_user, get, scrape, sh, smi_apps, stop, wait_ready  # noqa: E402
from scripts.gpu.results import check, save  # noqa: E402

MIB = 1 << 20


@dataclass
class Load:
    gpu: int
    user: str
    uid: int
    busy: bool
    gib: float
    proc: subprocess.Popen[str]
    pid: int = 0


def smi_gpus() -> dict[int, dict[str, float]]:
    out = sh("nvidia-smi", "--query-gpu=index,memory.used,memory.total,utilization.gpu,"
             "temperature.gpu,power.draw", "--format=csv,noheader,nounits")
    rows = {}
    for line in out.strip().splitlines():
        i, used, total, util, temp, power = (v.strip() for v in line.split(","))
        rows[int(i)] = {"used_mib": float(used), "total_mib": float(total), "util": float(util),
                        "temp": float(temp), "power": float(power)}
    return rows


def smi_features() -> dict[int, dict[str, bool]]:
    """Per GPU: whether it has a fan, ECC on and NVLink links (rows the driver cannot answer
    otherwise)."""
    out = sh("nvidia-smi", "--query-gpu=index,fan.speed,ecc.mode.current",
             "--format=csv,noheader,nounits")
    features = {}
    for line in out.strip().splitlines():
        i, fan, ecc = (v.strip() for v in line.split(","))
        try:
            links = "Link" in sh("nvidia-smi", "nvlink", "--status", "-i", i)
        except subprocess.CalledProcessError:
            links = False
        features[int(i)] = {"fan": "N/A" not in fan, "ecc": ecc.lower() == "enabled",
                            "nvlink": links}
    return features


def check_every_row(series: dict[str, list[Any]], features: dict[int, dict[str, bool]]) -> None:
    """Every per-GPU metric row NVML reads in the default groups is exposed for every GPU."""
    optional = {metrics.FAN_SPEED.name: "fan", metrics.ECC_ERRORS.name: "ecc",
                metrics.NVLINK_TRAFFIC.name: "nvlink"}
    # Page retirement is the pre-Ampere mechanism: a GPU that remaps rows answers NOT_SUPPORTED.
    retired = {metrics.RETIRED_PAGES.name, metrics.RETIRED_PENDING.name}

    def exposed(name: str, i: int) -> bool:
        return any(s.labels.get("gpu") == str(i) for s in series.get(name, []))

    for i, has in features.items():
        remaps = exposed(metrics.REMAPPED_ROWS.name, i)
        missing = [row.name for row in metrics.GPU_ROWS
                   if row.nvml is not None and row.group in metrics.default_groups()
                   and not exposed(row.name, i)
                   and has.get(optional.get(row.name, ""), True)
                   and not (remaps and row.name in retired)]
        check(f"gpu {i}: every NVML row exposed", not missing, f"missing: {missing}")


def start_load(gpu: int, user: pwd.struct_passwd, busy: bool, gib: float, workdir: Path) -> Load:
    load = workdir / "cuda_load.py"
    cmd = [sys.executable, str(load), "--gpu", str(gpu), "--gib", str(gib), "--seconds", "400"]
    if busy:
        cmd.append("--busy")
    env = {**os.environ, "HOME": str(workdir), "PYTHONPATH": ""}
    if user.pw_uid != 0:  # setpriv execs in place; runuser would add a parent process
        tool = shutil.which("setpriv")
        cmd = ([tool, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *cmd]
               if tool else ["runuser", "-u", user.pw_name, "--", *cmd])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=workdir, env=env)
    return Load(gpu, user.pw_name, user.pw_uid, busy, gib, proc)


def mib(value: float | None) -> str:
    return "none" if value is None else f"{value / MIB:.1f} MiB"


def value(series: dict[str, list[Any]], metric: metrics.Metric, **labels: str) -> float | None:
    for s in series.get(metric.name, []):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return None


def plan(gpus: int, busy_gib: float, idle_gib: float) -> list[tuple[int, bool, bool, float]]:
    """(gpu, as_root, busy, GiB) per process: two on one GPU, else one per GPU alternating."""
    if gpus == 1:
        return [(0, True, True, busy_gib), (0, False, False, idle_gib)]
    return [(i, i % 2 == 0, i % 2 == 0, (busy_gib if i % 2 == 0 else idle_gib) + 0.5 * (i // 2))
            for i in range(gpus)]


def check_processes(series: dict[str, list[Any]], snap: dict[str, Any], loads: list[Load],
                    apps: dict[int, float]) -> None:
    by_pid = {p["pid"]: (g["index"], p) for g in snap["gpus"] for p in g["processes"]}
    for ld in loads:
        tag = f"pid {ld.pid} ({ld.user}, gpu {ld.gpu}, {'busy' if ld.busy else 'idle'})"
        labels = {"gpu": str(ld.gpu), "pid": str(ld.pid)}
        mem = value(series, metrics.PROCESS_MEMORY, **labels, user=ld.user, uid=str(ld.uid))
        check(f"{tag}: metric with user/uid", mem is not None,
              f"user={ld.user} uid={ld.uid}")
        smi = apps.get(ld.pid)
        check(f"{tag}: memory = nvidia-smi", mem is not None and smi is not None
              and abs(mem / MIB - smi) <= 1, f"exporter {mib(mem)}, nvidia-smi {smi} MiB")
        util = value(series, metrics.PROCESS_UTILIZATION, **labels)
        ok = util is not None and (util > 0.2 if ld.busy else util < 0.05)
        check(f"{tag}: utilisation {'> 0.2' if ld.busy else '~0'}", ok, f"{util}")
        gpu_index, jp = by_pid.get(ld.pid, (None, {}))
        check(f"{tag}: JSON process", gpu_index == ld.gpu and jp.get("user") == ld.user
              and jp.get("uid") == ld.uid and jp.get("used_memory_bytes") == mem,
              f"{ {k: jp.get(k) for k in ('user', 'uid', 'used_memory_bytes', 'type')} }")


def check_gpus(series: dict[str, list[Any]], loads: list[Load],
               smi: dict[int, dict[str, float]]) -> None:
    for i, row in smi.items():
        g = {"gpu": str(i)}
        used = value(series, metrics.MEMORY_USED, **g)
        total = value(series, metrics.MEMORY_TOTAL, **g)
        check(f"gpu {i}: memory used = nvidia-smi", used is not None
              and abs(used / MIB - row["used_mib"]) <= 4,
              f"exporter {mib(used)}, smi {row['used_mib']} MiB")
        check(f"gpu {i}: memory total = nvidia-smi", total is not None
              and abs(total / MIB - row["total_mib"]) <= 4,
              f"exporter {mib(total)}, smi {row['total_mib']} MiB")
        temp = value(series, metrics.TEMPERATURE, **g)
        check(f"gpu {i}: temperature plausible", temp is not None and 10 <= temp <= 95,
              f"{temp} C (smi {row['temp']})")
        power = value(series, metrics.POWER_USAGE, **g)
        limit = value(series, metrics.POWER_LIMIT, **g)
        check(f"gpu {i}: power plausible", power is not None and limit is not None
              and 20 <= power <= limit * 1.1, f"{power} W of {limit} W (smi {row['power']})")
        util = value(series, metrics.UTILIZATION, **g)
        busy = any(ld.busy for ld in loads if ld.gpu == i)
        check(f"gpu {i}: utilisation {'> 0' if busy else 'in 0..1'}", util is not None
              and 0 <= util <= 1 and (util > 0 or not busy), f"{util} (smi {row['util']} %)")
        for user in {ld.user for ld in loads if ld.gpu == i}:
            want = sum(value(series, metrics.PROCESS_MEMORY, gpu=str(i), pid=str(ld.pid)) or 0
                       for ld in loads if ld.gpu == i and ld.user == user)
            got = value(series, metrics.USER_MEMORY, gpu=str(i), user=user)
            check(f"gpu {i}: user {user} memory = sum of its processes", got == want,
                  f"{got} vs {want}")
        count = value(series, metrics.PROCESSES, **g)
        mine = sum(1 for ld in loads if ld.gpu == i)
        check(f"gpu {i}: gpu_processes counts ours", count is not None and count >= mine,
              f"{count} (ours {mine})")


def check_accounting(base: str, loads: list[Load], apps: dict[int, float]) -> None:
    """Idle-accounting counters over a few seconds against nvidia-smi's memory per process:
    each user's held (and, for the idle load, idle) byte-seconds = memory x time."""
    first, start = scrape(base), time.monotonic()
    time.sleep(3.0)
    last, seconds = scrape(base), time.monotonic() - start
    for user in sorted({ld.user for ld in loads}):
        mine = [ld for ld in loads if ld.user == user]

        def grew(metric: metrics.Metric, user: str = user) -> float:
            return (value(last, metric, user=user) or 0.0) - (value(first, metric, user=user)
                                                              or 0.0)

        held = sum(apps.get(ld.pid, 0.0) for ld in mine) * MIB * seconds
        idle = sum(apps.get(ld.pid, 0.0) for ld in mine if not ld.busy) * MIB * seconds
        got_held, got_idle = grew(accounting.HELD_MEMORY_SECONDS), grew(
            accounting.IDLE_MEMORY_SECONDS)
        check(f"user {user}: accounted held memory = memory x time (15 %)",
              abs(got_held - held) <= 0.15 * held,
              f"{got_held / MIB:.0f} vs {held / MIB:.0f} MiB-s over {seconds:.1f} s")
        check(f"user {user}: accounted idle memory = idle processes' memory x time (15 %)",
              abs(got_idle - idle) <= 0.15 * held,
              f"{got_idle / MIB:.0f} vs {idle / MIB:.0f} MiB-s")


def timings(base: str, n: int = 30) -> dict[str, Any]:
    lat, sizes, durations = [], [], []
    for _ in range(n):
        _, body, seconds = get(base + "/metrics")
        lat.append(seconds)
        sizes.append(len(body))
        _, js, _ = get(base + "/api/v1/snapshot")
        durations.append(json.loads(js)["duration_seconds"])
        time.sleep(0.05)
    lat.sort()
    return {"scrape_p50_ms": statistics.median(lat) * 1e3, "scrape_max_ms": lat[-1] * 1e3,
            "body_bytes": statistics.median(sizes),
            "collection_p50_ms": statistics.median(durations) * 1e3,
            "collection_max_ms": max(durations) * 1e3}


def smi_minor_numbers() -> dict[str, str]:
    """nvidia-smi's minor number (``/dev/nvidia<N>``) of each GPU, by UUID."""
    found: dict[str, str] = {}
    uuid = ""
    for line in sh("nvidia-smi", "-q").splitlines():
        key, _, text = (part.strip() for part in line.partition(":"))
        if key == "GPU UUID":
            uuid = text
        elif key == "Minor Number" and uuid.startswith("GPU-"):
            found.setdefault(uuid, text)
    return found


def check_minor_numbers(series: dict[str, list[Any]]) -> None:
    """The jobstats group's minor_number (nvmlDeviceGetMinorNumber) is nvidia-smi's."""
    ours = {s.labels["uuid"]: s.labels.get("minor_number", "")
            for s in series.get(metrics.JOBSTATS_MEMORY_TOTAL.name, [])
            if not s.labels.get("GPU_I_ID")}
    smi = smi_minor_numbers()
    check("jobstats minor_number is nvidia-smi's Minor Number", ours == smi,
          f"ours {ours}, nvidia-smi {smi}")


def run_checks(args: argparse.Namespace, base: str, *, exporter: subprocess.Popen[bytes],
               loads: list[Load], workdir: Path, result: dict[str, Any]) -> None:
    """Everything between the exporter being started and being stopped."""
    t0 = time.monotonic()
    if not check("exporter ready (/readyz 200)", wait_ready(base, exporter),
                 f"{time.monotonic() - t0:.1f} s"):
        return
    other, root = ensure_user(args.user), pwd.getpwuid(0)
    for gpu, as_root, busy, gib in plan(len(result["nvidia_smi_before"]), args.busy_gib,
                                        args.idle_gib):
        loads.append(start_load(gpu, root if as_root else other, busy, gib, workdir))
    for ld in loads:
        assert ld.proc.stdout is not None
        line = ld.proc.stdout.readline().split()
        ld.pid = int(line[1]) if len(line) == 2 and line[0] == "ready" else -1
        check(f"load on gpu {ld.gpu} as {ld.user} started", ld.pid > 0, f"pid {ld.pid}")
    time.sleep(4.0)  # utilisation samples of the busy processes accumulate
    scrape(base)
    time.sleep(1.0)  # the next collection reads the samples since the previous one
    series = scrape(base)
    _, js, _ = get(base + "/api/v1/snapshot")
    snap = json.loads(js)
    apps, smi_now = smi_apps(), smi_gpus()
    print("nvidia-smi apps (pid -> MiB):", apps, "\nnvidia-smi gpus:", smi_now, flush=True)
    for metric in (metrics.PROCESS_MEMORY, metrics.PROCESS_UTILIZATION, metrics.USER_MEMORY,
                   metrics.MEMORY_USED, metrics.MEMORY_TOTAL, metrics.UTILIZATION):
        for s in series.get(metric.name, []):
            print(f"  {metric.name}{s.labels} {s.value}", flush=True)
    result.update(nvidia_smi_apps=apps, nvidia_smi_gpus=smi_now, snapshot=snap,
                  metrics={k: [(s.labels, s.value) for s in v] for k, v in series.items()
                           if k.startswith("gpu_")})
    check("snapshot source up, no errors", snap["source_up"] and not snap["errors"],
          f"errors={snap['errors']}")
    check_processes(series, snap, loads, apps)
    check_gpus(series, loads, smi_now)
    check_every_row(series, smi_features())
    check_minor_numbers(series)
    check_accounting(base, loads, apps)
    result["timings_loaded"] = timings(base)
    print("timings with load:", result["timings_loaded"], flush=True)
    for ld in loads:
        ld.proc.send_signal(signal.SIGKILL)
        ld.proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and set(smi_apps()) & {ld.pid for ld in loads}:
        time.sleep(0.3)
    time.sleep(1.0)
    after = scrape(base)
    left = [ld.pid for ld in loads
            if value(after, metrics.PROCESS_MEMORY, pid=str(ld.pid)) is not None]
    check("process series vanish after the processes exit", not left, f"left: {left}")
    gone = [u for u in {ld.user for ld in loads}
            if any(value(after, metrics.USER_MEMORY, gpu=str(ld.gpu), user=u) for ld in loads)]
    check("user memory back to 0 / absent", not gone, f"still: {gone}")
    result["timings_idle"] = timings(base)
    print("timings idle:", result["timings_idle"], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9477)
    parser.add_argument("--busy-gib", type=float, default=6.0)
    parser.add_argument("--idle-gib", type=float, default=3.0)
    parser.add_argument("--user", default="gpucheck")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    result: dict[str, Any] = {"nvidia_smi_before": smi_gpus()}
    print("nvidia-smi:", result["nvidia_smi_before"], flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpucheck-"))
    shutil.copy(ROOT / "scripts" / "gpu" / "cuda_load.py", workdir / "cuda_load.py")
    os.chmod(workdir, 0o777)  # the other user's HOME and cwd (torch writes caches there)
    log_path = workdir / "exporter.log"
    with log_path.open("wb") as log:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--source", "nvml", "--web.listen-address",
             f"127.0.0.1:{args.port}", "--collector.min-interval", "500ms",
             "--collector.jobstats"],
            cwd=ROOT, stderr=log)
    loads: list[Load] = []
    try:
        run_checks(args, base, exporter=exporter, loads=loads, workdir=workdir, result=result)
    except Exception as exc:  # report what ran so far, then fail
        check("check script ran to the end", False, repr(exc))
        raise
    finally:
        for ld in loads:
            if ld.proc.poll() is None:
                ld.proc.kill()
        code = stop(exporter)
        check("exporter exits 0 on SIGTERM", code == 0, f"exit {code}")
        print("--- exporter log (tail) ---\n" + log_path.read_text(errors="replace")[-3000:])
        status = finish(result, args.json, workdir)
    return status


def finish(result: dict[str, Any], out: Path | None, workdir: Path) -> int:
    passed = save(result, out)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
