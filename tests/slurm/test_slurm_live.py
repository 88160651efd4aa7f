"""A real Slurm (Debian's 22.05: slurmctld, slurmd, slurmdbd, munge, MariaDB) with the shipped
scripts, the real exporter (NVML faked: two GPUs whose GPU 0 lists the job's real processes)
and a real Prometheus.

One batch job of user ``nobody`` asks for both GPUs and runs on GPU 0 only. Then:

- the real prolog (``slurm/prolog.sh``) writes the allocation files, and the exporter serves
  ``gpu_allocation_info`` for both GPUs with the job and its user, and the Jobstats series;
- the job's real processes are attributed to the job and its user through their real cgroups
  (``proctrack/cgroup`` on cgroup v1; the test says so where only ``linuxproc`` runs);
- Jobstats' own query shapes answer the job's numbers from Prometheus;
- the real epilog removes the files; the real slurmctld epilog
  (``slurm/slurmctld-epilog.sh``) stores the summary in the job's AdminComment through
  slurmdbd, and ``gpu-exporter report job`` reads it back when Prometheus cannot answer.

Skips with one line saying why where Slurm cannot start (not root, not installed).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.catalogue.workloads import identify
from exporter.report.admincomment import B32_PREFIX, PREFIX
from tests.dashboards.live import PROMETHEUS, http_get, start_prometheus
from tests.exposition.parse import series
from tests.processes import free_port, stop_all
from tests.slurm.cluster import Cluster, wait_for, why_not

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
GPU0_UTILIZATION = 60.0  # percent, the fake NVML's GPU 0 (GPU 1: 0)


@dataclass
class Stack:
    """The cluster, the exporter and Prometheus, and the job run on them."""

    root: Path
    cluster: Cluster
    exporter_port: int
    prometheus_port: int
    processes: list[subprocess.Popen[bytes]]
    started: float
    job: str = ""

    def metrics(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.exporter_port}/metrics")
        return body.decode() if status == 200 else ""

    def query(self, expr: str, at: float) -> list[dict[str, object]]:
        params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        status, body = http_get(f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?"
                                f"{params}", timeout=10)
        assert status == 200, body[:300]
        result: list[dict[str, object]] = json.loads(body)["data"]["result"]
        return result

    def report(self, *args: str, prometheus: int | None = None) -> subprocess.CompletedProcess:
        port = self.prometheus_port if prometheus is None else prometheus
        return subprocess.run(
            [sys.executable, "-m", "exporter", "report", "job", self.job,
             "--prometheus.url", f"http://127.0.0.1:{port}", "--step", "1s", *args],
            cwd=ROOT, env=self.cluster.env, capture_output=True, text=True, timeout=120,
            check=False)


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _wrappers(root: Path, prometheus_port: int) -> tuple[str, str, str]:
    """The shipped scripts, run from wrappers that set what a site would configure (slurmd
    and slurmctld start their scripts with a bare environment)."""
    allocations = root / "gpustat"
    common = (f"export PATH=/usr/sbin:/usr/bin:/sbin:/bin GPU_EXPORTER_ALLOCATION_DIR="
              f"{allocations}\n")
    command = _script(root / "gpu-exporter",
                      f"cd {ROOT} && exec {sys.executable} -m exporter \"$@\"\n")
    prolog = _script(root / "prolog", common + f"exec /bin/sh {ROOT / 'slurm' / 'prolog.sh'}\n")
    epilog = _script(root / "epilog", common + f"exec /bin/sh {ROOT / 'slurm' / 'epilog.sh'}\n")
    ctld = _script(root / "ctld-epilog", common + (
        f"export SLURM_CONF={root / 'etc' / 'slurm.conf'} "
        f"PROMETHEUS_URL=http://127.0.0.1:{prometheus_port} STEP=1s WAIT=2 "
        f"GPU_EXPORTER={command} GPU_EXPORTER_EPILOG_CONFIG=/nonexistent\n"
        f"exec /bin/sh {ROOT / 'slurm' / 'slurmctld-epilog.sh'} "
        f">> {root / 'log' / 'ctld-epilog.log'} 2>&1\n"))
    return prolog, epilog, ctld


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    reason = why_not() or ("" if PROMETHEUS.exists() else "needs Debian's prometheus package")
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="gpu-exporter-slurm-"))
    root.chmod(0o711)  # the job's user reaches the cluster's configuration and munge inside
    (root / "log").mkdir()
    exporter_port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    cluster = Cluster(root / "slurm")
    cluster.root.mkdir()
    try:
        prometheus, prometheus_port = start_prometheus(root, [
            {"job_name": "gpu-exporter", "static_configs": [{
                "targets": [f"127.0.0.1:{exporter_port}"], "labels": {"cluster": "gpuexp"}}]}],
            deadline=time.monotonic() + 60)
        processes.append(prometheus)
        env = {**os.environ, "GPU_EXPORTER_TEST_PID_FILE": str(root / "pids")}
        with (root / "log" / "exporter.log").open("wb") as log:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "tests.slurm.fake_nvml_jobs_main", "--slurm",
                 "--slurm.allocation-dir", str(cluster.root / "gpustat"),
                 "--collector.jobstats", "--web.listen-address", f"127.0.0.1:{exporter_port}",
                 "--collector.min-interval", "0s", "--log.level", "warning"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        try:
            cluster.start(*_wrappers(cluster.root, prometheus_port))
        except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            last = [line for line in cluster.logs().splitlines()
                    if line.strip() and not line.startswith("==")][-1:]
            pytest.skip(f"Slurm could not start here: {first}; {' '.join(last)}")
        yield Stack(root, cluster, exporter_port, prometheus_port, processes, started)
    finally:
        cluster.close()
        stop_all(processes, timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _job_pids(stack: Stack) -> list[int]:
    """The job's own processes (not slurmstepd)."""
    out = stack.cluster.run("scontrol", "listpids", stack.job, check=False).stdout
    pids = [int(line.split()[0]) for line in out.splitlines()[1:]
            if line.split() and line.split()[0].isdigit()]
    return [pid for pid in pids if Path(f"/proc/{pid}/comm").exists()
            and Path(f"/proc/{pid}/comm").read_text().strip() != "slurmstepd"]


def test_a_job_holding_two_gpus_and_using_one(stack: Stack) -> None:
    stop = stack.cluster.root / "stop"
    stack.job = stack.cluster.run(
        "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--gres=gpu:2",
        "--job-name=train",  # one long-lived process (a shell loop's sleeps come and go)
        f"--wrap=exec /usr/bin/python3 -c 'import os, time\nwhile not os.path.exists(\"{stop}\"): "
        "time.sleep(0.2)'",
        user="nobody").stdout.strip()
    wait_for("the job to run", lambda: "JobState=RUNNING" in stack.cluster.run(
        "scontrol", "-o", "show", "job", stack.job).stdout, timeout=30)
    pids = wait_for("the job's processes", lambda: _job_pids(stack), timeout=30)
    assert isinstance(pids, list)
    (stack.root / "pids").write_text("\n".join(map(str, pids)))

    # The real prolog wrote the allocation files (index files: no nvidia-smi here).
    files = stack.cluster.root / "gpustat"
    assert {p.name: p.read_text() for p in files.iterdir()} == {
        "0": f"{stack.job} {NOBODY}\n", "1": f"{stack.job} {NOBODY}\n"}

    # The job's processes, through their real cgroups.
    if not stack.cluster.cgroups:
        pytest.skip("cgroup v1 freezer not writable here: slurmd runs proctrack/linuxproc, so "
                    "the job has no cgroup to attribute its processes through")
    for pid in pids:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        found = identify(cgroup)
        assert found is not None, cgroup
        assert found.kind == "slurm", cgroup
        assert found.ids["slurm_job"] == stack.job
        assert found.ids["slurm_uid"] == str(NOBODY)
    text = wait_for("the exporter to attribute the job's processes", lambda: (
        (body := stack.metrics()) and len(series(body, "gpu_process_memory_used_bytes")) ==
        len(pids) and body), timeout=30)
    assert isinstance(text, str)
    for process in series(text, "gpu_process_memory_used_bytes"):
        assert (process["slurm_job"], process["user"], process["uid"]) == (
            stack.job, "nobody", str(NOBODY))
    allocations = {s["gpu"]: s for s in series(text, "gpu_allocation_info")}
    assert sorted(allocations) == ["0", "1"]
    for found_row in allocations.values():
        assert (found_row["slurm_job"], found_row["user"], found_row["uid"],
                found_row["resource"]) == (stack.job, "nobody", str(NOBODY), "gres/gpu")
    job_ids = series(text, "nvidia_gpu_jobId")
    assert {(s["minor_number"], s["jobid"], s["userid"]) for s in job_ids} == {
        ("0", stack.job, str(NOBODY)), ("1", stack.job, str(NOBODY))}


def test_jobstats_queries_and_the_stored_summary(stack: Stack) -> None:
    if not stack.job:
        pytest.skip("no job ran")
    # Let Prometheus hold a few samples of the job, then end it.
    wait_for("8 samples of the job in Prometheus", lambda: all(
        float(r["value"][1]) >= 8 for r in stack.query(  # type: ignore[index]
            f'count_over_time(nvidia_gpu_jobId{{jobid="{stack.job}"}}[1m])', time.time()))
        and len(stack.query(f'nvidia_gpu_jobId{{jobid="{stack.job}"}}', time.time())) == 2,
        timeout=60)
    (stack.cluster.root / "stop").touch()
    wait_for("the epilog to remove the allocation files",
             lambda: not any((stack.cluster.root / "gpustat").iterdir()), timeout=30)
    wait_for("the allocations to leave /metrics",
             lambda: "gpu_allocation_info{" not in stack.metrics(), timeout=30)
    if not stack.cluster.accounting:
        pytest.skip("no MariaDB/slurmdbd here: Slurm 22.05 stores a finished job's AdminComment "
                    "only through slurmdbd")

    def readable() -> tuple[str, int, int] | None:
        # (a lower-cased JS1: is the epilog's first try on this Slurm; the end time reaches the
        # database on its own schedule)
        value, _, times = stack.cluster.run("sacct", "-n", "-P", "-X", "-j", stack.job, "-o",
                                            "AdminComment,Start,End").stdout.strip().partition("|")
        first, _, last = times.partition("|")
        if not (value.startswith(PREFIX) or value.upper().startswith(B32_PREFIX)):
            return None
        return (value, int(first), int(last)) if first.isdigit() and last.isdigit() else None

    found = wait_for("the slurmctld epilog to store the summary", readable, timeout=60)
    assert isinstance(found, tuple)
    stored, start, end = found

    # Jobstats' queries, as jobstats.py sends them (at the job's end, over its run time).
    duration = end - start
    utilization = {r["metric"]["minor_number"]: float(r["value"][1]) for r in stack.query(  # type: ignore[index]
        f"avg_over_time((nvidia_gpu_duty_cycle{{cluster='gpuexp'}} and nvidia_gpu_jobId == "
        f"{stack.job})[{duration}s:])", end)}
    assert utilization == {"0": GPU0_UTILIZATION, "1": 0.0}
    memory = {r["metric"]["minor_number"]: float(r["value"][1]) for r in stack.query(  # type: ignore[index]
        f"max_over_time((nvidia_gpu_memory_used_bytes{{cluster='gpuexp'}} and "
        f"nvidia_gpu_jobId == {stack.job})[{duration}s:])", end)}
    assert memory["0"] > memory["1"] > 0

    # The stored summary: Jobstats' form where this Slurm keeps case, else the base-32 one.
    if stored.startswith(PREFIX):
        doc = json.loads(gzip.decompress(base64.b64decode(stored[len(PREFIX):])))  # as jobstats
    else:
        assert stored.upper().startswith(B32_PREFIX), stored[:40]
        doc = json.loads(gzip.decompress(base64.b32decode(stored[len(B32_PREFIX):].upper())))
    (node,) = doc["nodes"].values()
    assert node["gpu_utilization"] == {"0": GPU0_UTILIZATION, "1": 0.0}
    assert doc["gpus"] == 2
    ours = node["gpu_exporter"]
    assert ours["1"]["idle_seconds"] == ours["1"]["held_seconds"] > 0

    live = stack.report("--format", "json")
    assert live.returncode == 0, live.stderr
    from_prometheus = json.loads(live.stdout)
    assert from_prometheus["source"] == "prometheus"
    assert from_prometheus["user"] == "nobody"
    assert [g["figures"]["utilization_ratio"] for g in from_prometheus["gpus"]] == [0.6, 0.0]

    gone = free_port()  # Prometheus gone: the stored summary
    dead = stack.report(prometheus=gone)
    assert dead.returncode == 0, dead.stderr
    assert "From the summary stored in the job's AdminComment" in dead.stdout
    assert "cannot reach Prometheus" in dead.stderr
    assert "held without use 100% of the time" in dead.stdout  # GPU 1: allocated, unused
    stored_json = json.loads(stack.report("--format", "json", prometheus=gone).stdout)
    assert stored_json["source"] == "stored"
    assert [(g["gpu"], g["figures"]["utilization_ratio"]) for g in stored_json["gpus"]] == [
        ("0", 0.6), ("1", 0.0)]
    assert stored_json["gpus"][1]["figures"]["idle_seconds"] == (
        from_prometheus["gpus"][1]["figures"]["idle_seconds"])
    print(f"\nSlurm test: {time.monotonic() - stack.started:.1f} s, summary stored as "
          f"{stored.split(':')[0]} ({len(stored)} characters)")
