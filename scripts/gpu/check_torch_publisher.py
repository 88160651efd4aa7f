"""GPU check of the PyTorch allocator publisher and the exporter's allocator series (run as root).

    python3 scripts/gpu/check_torch_publisher.py [--port 9478] [--user torchcheck]
                                                 [--json OUT.json] [--fake]

Starts three torch processes on GPU 0 (scripts/gpu/torch_worker.py), each holding tensors plus
freed memory PyTorch keeps cached:

- A, root, publisher switched on with no code change: ``gpu-exporter-run --interval 1 python
  torch_worker.py`` (the launcher's environment and sitecustomize hook);
- B, a second Unix user (created with useradd), publisher switched on in code
  (``gpu_exporter_torch.start()``);
- C, root, no publisher; the second user then plants a forged file for C's pid (a trust-rule
  check: its numbers must never appear).

The publisher package is copied into a scratch directory first (as a user would vendor it), so
the second user can read it. Then the exporter runs with ``--collector.torch --torch.dir DIR``
and the script compares, per process, the exporter's allocator series with
``torch.cuda.memory_allocated/memory_reserved/memory_stats`` printed by the process itself (exact,
the workers are idle), NVML's per-process memory with nvidia-smi, and the driver overhead with
NVML minus reserved. B then asks for 400 GiB and catches the OOM: ``..._ooms_total`` must read 1,
and so must B's user's ``gpu_user_torch_ooms_total``. B exits: its series must vanish, its
user's counter must keep the OOM. Prints PASS/FAIL lines and a table; exit 1 on any FAIL.

``--fake`` (for the test suite, no GPU): the workers import the fake torch of the tests
(``tests/fixtures/fake_torch.py`` on PYTHONPATH) and the exporter runs on a fake NVML that lists
the workers; nvidia-smi comparisons are reported as SKIP. The second user is ``nobody`` (no
useradd) when run as root; otherwise the cross-user checks are SKIPped.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from exporter.catalogue.metrics import allocator as rows  # noqa: E402
from exporter.catalogue.metrics.process import PROCESS_MEMORY  # noqa: E402
from scripts.gpu.probes import ensure_user, scrape, smi_apps, stop, wait_ready  # noqa: E402
from scripts.gpu.results import check, save  # noqa: E402

MIB = 1 << 20
FAKE_UUID = "2f6c1c5e-7a1b-4c9d-8e0f-0000000000a0"


@dataclass
class Worker:
    name: str
    user: pwd.struct_passwd
    proc: subprocess.Popen[str]
    reports: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return int(self.reports[0]["pid"]) if self.reports else -1

    def read(self, timeout: float = 120.0) -> dict[str, Any]:
        """The worker's next JSON line (its reports are its own torch figures)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.name} ended (exit {self.proc.poll()})")
            line = line.strip()
            if line.startswith("{"):
                report: dict[str, Any] = json.loads(line)
                self.reports.append(report)
                return report
            print(f"  worker {self.name}: {line}", flush=True)
        raise RuntimeError(f"worker {self.name}: no report within {timeout} s")

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()


def other_user(name: str, fake: bool) -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    if fake:
        return pwd.getpwnam("nobody")
    return ensure_user(name)


def as_user(user: pwd.struct_passwd, cmd: list[str]) -> list[str]:
    if user.pw_uid == os.geteuid():
        return cmd
    tool = shutil.which("setpriv")  # execs in place: the pid stays the worker's
    if tool:
        return [tool, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *cmd]
    return ["runuser", "-u", user.pw_name, "--", *cmd]


def start_worker(name: str, user: pwd.struct_passwd, cmd: list[str], env: dict[str, str],
                 workdir: Path) -> Worker:
    proc = subprocess.Popen(as_user(user, cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=workdir, env=env)
    return Worker(name, user, proc)


def value(series: dict[str, list[Any]], name: str, pid: int) -> float | None:
    for sample in series.get(name, []):
        if sample.labels.get("pid") == str(pid):
            return float(sample.value)
    return None


def user_total(series: dict[str, list[Any]], name: str, user: str) -> float | None:
    """A per-(GPU, user) counter summed over the GPUs (all workers run on GPU 0)."""
    found = [float(s.value) for s in series.get(name, []) if s.labels.get("user") == user]
    return sum(found) if found else None


def wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return bool(predicate())


#: Published field (worker report "stats" key) -> the exporter's row.
FIELDS = {
    "allocated_bytes": rows.TORCH_ALLOCATED,
    "reserved_bytes": rows.TORCH_RESERVED,
    "active_bytes": rows.TORCH_ACTIVE,
    "inactive_split_bytes": rows.TORCH_INACTIVE_SPLIT,
    "peak_allocated_bytes": rows.TORCH_PEAK_ALLOCATED,
    "alloc_retries": rows.TORCH_ALLOC_RETRIES,
    "ooms": rows.TORCH_OOMS,
}


def compare_worker(series: dict[str, list[Any]], worker: Worker, report: dict[str, Any],
                   apps: dict[int, float] | None) -> None:
    tag = f"{worker.name} (pid {worker.pid}, {worker.user.pw_name})"
    check(f"{tag}: torch's own allocated/reserved = its memory_stats",
          report["allocated"] == report["stats"]["allocated_bytes"]
          and report["reserved"] == report["stats"]["reserved_bytes"]
          and report["allocated"] < report["reserved"],
          f"allocated {report['allocated'] / MIB:.1f} MiB < reserved "
          f"{report['reserved'] / MIB:.1f} MiB")
    for key, row in FIELDS.items():
        got, want = value(series, row.name, worker.pid), report["stats"][key]
        check(f"{tag}: {row.name} = torch", got == want, f"exporter {got}, torch {want}")
    used = value(series, PROCESS_MEMORY.name, worker.pid)
    if apps is None:
        check(f"{tag}: NVML process memory = nvidia-smi", None, "fake NVML")
    else:
        smi = apps.get(worker.pid)
        check(f"{tag}: NVML process memory = nvidia-smi", used is not None and smi is not None
              and abs(used / MIB - smi) <= 1, f"exporter {used}, nvidia-smi {smi} MiB")
    overhead = value(series, rows.TORCH_DRIVER_OVERHEAD.name, worker.pid)
    want_overhead = None if used is None else used - report["reserved"]
    check(f"{tag}: driver overhead = NVML - reserved, 100 MiB..3 GiB",
          overhead is not None and overhead == want_overhead
          and 100 * MIB <= overhead <= 3 << 30,
          f"{overhead} B = {None if overhead is None else round(overhead / MIB, 1)} MiB")
    if used is not None:
        print(f"  {tag}: NVML {used / MIB:.1f} MiB = tensors {report['allocated'] / MIB:.1f} + "
              f"allocator cache {(report['reserved'] - report['allocated']) / MIB:.1f} + "
              f"context and libraries {(used - report['reserved']) / MIB:.1f} MiB", flush=True)


def forge_file(torch_dir: Path, victim: Worker, forger: pwd.struct_passwd) -> Path:
    """As ``forger``, write a well-formed file claiming ``victim``'s pid (and start time)."""
    stat = Path(f"/proc/{victim.pid}/stat").read_bytes()
    start_ticks = int(stat[stat.rindex(b")") + 1:].split()[19])
    namespace = os.stat(f"/proc/{victim.pid}/ns/pid").st_ino
    path = torch_dir / f"{victim.pid}-{start_ticks}-{namespace}.json"
    document = {"format": 1, "pid": victim.pid, "start_ticks": start_ticks,
                "pid_namespace": namespace, "uid": victim.user.pw_uid, "time": time.time(),
                "interval_seconds": 1, "torch_version": "forged",
                "devices": [{"index": 0, "uuid": victim.reports[0].get("uuid", ""),
                             "allocated_bytes": 123, "reserved_bytes": 456, "ooms": 99}]}
    code = f"open({str(path)!r}, 'w').write({json.dumps(document)!r})"
    subprocess.run(as_user(forger, [sys.executable, "-c", code]), check=True, timeout=30)
    return path


def run_checks(args: argparse.Namespace, workdir: Path, result: dict[str, Any],
               workers: list[Worker], exporters: list[subprocess.Popen[bytes]]) -> None:
    fake: bool = args.fake
    torch_dir = workdir / "torch-stats"
    torch_dir.mkdir(mode=0o1777)
    torch_dir.chmod(0o1777)
    package = workdir / "vendored"
    shutil.copytree(ROOT / "gpu_exporter_torch", package / "gpu_exporter_torch",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "scripts" / "gpu" / "torch_worker.py", workdir / "torch_worker.py")
    os.chmod(workdir, 0o777)  # the other user's cwd and HOME (torch writes caches there)
    root = pwd.getpwuid(os.geteuid())
    second = other_user(args.user, fake)
    python_path = [str(package)]
    if fake:
        fake_dir = workdir / "fake-torch"
        fake_dir.mkdir()
        shutil.copy(ROOT / "tests" / "fixtures" / "fake_torch.py", fake_dir / "torch.py")
        python_path.append(str(fake_dir))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_TORCH")}
    env.update(HOME=str(workdir), PYTHONPATH=os.pathsep.join(python_path),
               GPU_EXPORTER_TORCH_DIR=str(torch_dir), GPU_EXPORTER_TORCH_INTERVAL="1",
               FAKE_TORCH_UUIDS=FAKE_UUID)
    worker = [sys.executable, str(workdir / "torch_worker.py"), "--gpu", "0", "--seconds", "240"]
    launcher = [sys.executable, "-m", "gpu_exporter_torch.run", "--interval", "1", "--"]
    a = start_worker("A", root, [*launcher, *worker, "--tensor-mib", "3008", "--cache-mib",
                                 "1024"], env, workdir)
    b = start_worker("B", second or root, [*worker, "--explicit", "--tensor-mib", "1536",
                                           "--cache-mib", "512"], env, workdir)
    plain_env = {k: v for k, v in env.items() if not k.startswith("GPU_EXPORTER_TORCH")}
    c = start_worker("C", root, [*worker, "--tensor-mib", "512", "--cache-mib", "0"],
                     plain_env, workdir)
    workers += [a, b, c]
    for w in workers:
        report = w.read()
        check(f"worker {w.name} ready as {w.user.pw_name}", report["event"] == "ready",
              f"pid {w.pid}, allocated {report['allocated'] / MIB:.0f} MiB, reserved "
              f"{report['reserved'] / MIB:.0f} MiB")
    check("publishers wrote their files (A via gpu-exporter-run, B via start())",
          wait_for(lambda: len(list(torch_dir.glob("*.json"))) >= 2, 15),
          f"{sorted(p.name for p in torch_dir.iterdir())}")

    forged: Path | None = None
    if second is None:
        check("forged file of another user for C", None, "needs root (setpriv)")
    else:
        forged = forge_file(torch_dir, c, second)

    base = f"http://127.0.0.1:{args.port}"
    command = ["--web.listen-address", f"127.0.0.1:{args.port}", "--collector.min-interval",
               "500ms", "--collector.torch", "--torch.dir", str(torch_dir)]
    if fake:
        processes = ",".join(f"{w.pid}:{w.reports[0]['reserved'] + 520 * MIB}" for w in workers)
        exporter_cmd = [sys.executable, "-m", "tests.torch_stats.fake_gpu_main", "--source",
                        "nvml", *command]
        exporter_env = {**os.environ, "FAKE_GPU_PROCESSES": processes,
                        "FAKE_GPU_UUID": f"GPU-{FAKE_UUID}"}
    else:
        exporter_cmd = [sys.executable, "-m", "exporter", "--source", "nvml", *command]
        exporter_env = dict(os.environ)
    log = (workdir / "exporter.log").open("wb")
    exporters.append(subprocess.Popen(exporter_cmd, cwd=ROOT, stderr=log, env=exporter_env))
    if not check("exporter ready (/readyz 200)", wait_ready(base, exporters[0])):
        return
    time.sleep(1.5)  # one publication (1 s) and one collection (0.5 s) after start

    series = scrape(base)
    apps = None if fake else smi_apps()
    result["nvidia_smi_apps"] = apps
    result["metrics"] = {k: [(s.labels, s.value) for s in v] for k, v in series.items()
                         if k.startswith("gpu_process")}
    for name in [PROCESS_MEMORY.name, *(row.name for row in rows.TORCH_ROWS)]:
        for sample in series.get(name, []):
            print(f"  {name}{sample.labels} {sample.value}", flush=True)
    for w in (a, b):
        compare_worker(series, w, w.ask("report"), apps)
    torch_series_of_c = [row.name for row in rows.TORCH_ROWS if value(series, row.name, c.pid)
                         is not None]
    check("C (no publisher): process series as before, no allocator series",
          value(series, PROCESS_MEMORY.name, c.pid) is not None and not torch_series_of_c,
          f"allocator series: {torch_series_of_c}" + (f"; forged {forged.name} (owner "
          f"{second.pw_name if second else ''}) ignored" if forged else ""))

    report = b.ask("oom")
    check("B: torch counted the caught OOM", report["stats"]["ooms"] == 1,
          f"num_ooms {report['stats']['ooms']}, num_alloc_retries "
          f"{report['stats']['alloc_retries']}")
    check(f"B: {rows.TORCH_OOMS.name} = 1 after the caught OOM",
          wait_for(lambda: value(scrape(base), rows.TORCH_OOMS.name, b.pid) == 1, 10))
    user_b = second.pw_name if second else pwd.getpwuid(os.getuid()).pw_name
    user_oom = rows.USER_TORCH_OOMS.name
    check(f"B: {user_oom}{{user={user_b}}} = 1 (the exporter saw B before its OOM)",
          wait_for(lambda: user_total(scrape(base), user_oom, user_b) == 1, 10),
          f"{user_total(scrape(base), user_oom, user_b)}")
    retries = value(scrape(base), rows.TORCH_ALLOC_RETRIES.name, b.pid)
    check(f"B: {rows.TORCH_ALLOC_RETRIES.name} = torch", retries ==
          report["stats"]["alloc_retries"], f"{retries}")

    assert b.proc.stdin is not None
    b.proc.stdin.write("exit\n")
    b.proc.stdin.flush()
    b.proc.wait(timeout=60)
    check("B's series vanish after it exits", wait_for(
        lambda: all(value(scrape(base), row.name, b.pid) is None for row in
                    (*rows.TORCH_ROWS, PROCESS_MEMORY)), 30))
    check(f"B's OOM stays in {user_oom}{{user={user_b}}} after B exits",
          user_total(scrape(base), user_oom, user_b) == 1,
          f"{user_total(scrape(base), user_oom, user_b)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=9478)
    parser.add_argument("--user", default="torchcheck")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--fake", action="store_true", help="fake torch and NVML (no GPU)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="torchcheck-"))
    result: dict[str, Any] = {}
    workers: list[Worker] = []
    exporters: list[subprocess.Popen[bytes]] = []
    try:
        run_checks(args, workdir, result, workers, exporters)
    except Exception as exc:  # report what ran so far, then fail
        check("check script ran to the end", False, repr(exc))
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(timeout=30)
        for exporter in exporters:
            stop(exporter)
        log = workdir / "exporter.log"
        if log.exists():
            print("--- exporter log (tail) ---\n" + log.read_text(errors="replace")[-3000:])
    out = args.json or (Path(os.environ["OUT"]) / "check_torch_publisher.json"
                        if os.environ.get("OUT") else None)
    passed = save(result, out)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
