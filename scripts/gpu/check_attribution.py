"""Real-kernel check of cluster attribution (run as root on the GPU machine).

    python3 scripts/gpu/check_attribution.py [--port 9478] [--gib 1] [--json OUT.json]
    python3 scripts/gpu/check_attribution.py --fake   # no GPU: fake NVML, plain processes

Starts three CUDA processes (scripts/gpu/cuda_load.py, torch) and moves each into a cgroup
of its own, created as root in the host's cgroup v2 tree:

- Kubernetes: ``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
  cri-containerd-<id>.scope``, with the kubelet's log tree laid in a temporary directory;
- Slurm (cgroup v2): ``system.slice/slurmstepd.scope/job_4242/step_0/user/task_0``;
- Docker (systemd driver): ``system.slice/docker-<id>.scope``, with a ``config.v2.json``
  naming the container in a temporary Docker root.

Then it serves the kubelet's PodResources API with a fake kubelet (tests/fixtures/kubelet.py,
the generated v1 servicer) on a unix socket, allocating this GPU's real UUID to the pod, and
compares: the kernel's ``/proc/<pid>/cgroup`` parsed by ``exporter.attribution.workloads``; the
PodResources client's table; and the exporter's ``/metrics`` (process labels and the allocation
series).
Everything it created is removed at the end. Prints PASS/FAIL lines; exit status 1 on any FAIL.
With ``--fake`` the GPU is the test fake NVML (its UUID) and the processes are plain Python
processes, so the same path runs on a machine without a GPU (still as root, for cgroups).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from exporter.catalogue.workloads import CgroupIdentity, identify  # noqa: E402
from scripts.gpu.results import RESULTS, check  # noqa: E402

POD_UID = "3f1e2d4c-5b6a-4798-8a9b-0c1d2e3f4a5b"
K8S_CID = "c0ffee" + "1" * 58
DOCKER_CID = "d0cce5" + "2" * 58
NAMESPACE, POD, CONTAINER = "ml", "trainer-0", "trainer"
DOCKER_NAME = "gpu-docker-check"
SLURM_JOB = "4242"
FAKE_UUID = "GPU-00000000-fake-4000-8000-000000000000"  # tests/sources h200(0)

#: Exporter flags for this check (cgroup attribution, log tree, PodResources, Docker root).
def exporter_flags(work: Path, socket_path: str) -> list[str]:
    return [
        "--kubernetes",
        "--slurm",
        "--containers",
        f"--kubernetes.pod-logs-dir={work / 'pods'}",
        f"--kubernetes.container-logs-dir={work / 'containers'}",
        f"--kubernetes.pod-resources-socket={socket_path}",
        "--kubernetes.pod-resources-interval=1s",
        f"--containers.docker-root={work / 'docker'}",
    ]


@dataclass
class Case:
    name: str
    cgroup: str  # relative to the cgroup v2 root
    expected: CgroupIdentity
    proc: subprocess.Popen[str] | None = None
    pid: int = 0
    created: list[Path] = field(default_factory=list)


def cases() -> list[Case]:
    systemd_uid = POD_UID.replace("-", "_")
    return [
        Case("kubernetes", "kubepods.slice/kubepods-besteffort.slice/"
             f"kubepods-besteffort-pod{systemd_uid}.slice/cri-containerd-{K8S_CID}.scope",
             CgroupIdentity("kubernetes", {"pod_uid": POD_UID, "container_id": K8S_CID,
                                           "runtime": "containerd"})),
        Case("slurm", f"system.slice/slurmstepd.scope/job_{SLURM_JOB}/step_0/user/task_0",
             CgroupIdentity("slurm", {"slurm_job": SLURM_JOB, "slurm_step": "0"})),
        Case("docker", f"system.slice/docker-{DOCKER_CID}.scope",
             CgroupIdentity("containers", {"container_id": DOCKER_CID, "runtime": "docker"})),
    ]


def cgroup2_root() -> Path | None:
    for candidate in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (candidate / "cgroup.procs").exists() and (
            (candidate / "cgroup.controllers").exists() or candidate.name == "unified"
        ):
            return candidate
    return None


def make_cgroup(root: Path, case: Case) -> None:
    """mkdir each missing level (remembered for removal) and move the process in."""
    path = root
    for part in case.cgroup.split("/"):
        path = path / part
        if not path.exists():
            path.mkdir()
            case.created.append(path)
    (path / "cgroup.procs").write_text(f"{case.pid}\n")


def remove_cgroups(root: Path, all_cases: list[Case]) -> None:
    for case in all_cases:
        if case.pid:
            with contextlib.suppress(OSError):  # already exited
                (root / "cgroup.procs").write_text(f"{case.pid}\n")  # back to the root
    created = {path for case in all_cases for path in case.created}
    for path in sorted(created, key=lambda p: len(p.parts), reverse=True):  # deepest first
        for _ in range(50):  # a just-exited process may linger in cgroup.procs briefly
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def start_process(fake: bool, gib: float) -> subprocess.Popen[str]:
    if fake:
        code = "import os,time; print('ready', os.getpid(), flush=True); time.sleep(300)"
        cmd = [sys.executable, "-c", code]
    else:
        cmd = [sys.executable, str(ROOT / "scripts/gpu/cuda_load.py"), "--gpu", "0", "--gib",
               str(gib), "--seconds", "300"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def lay_files(work: Path) -> None:
    """The kubelet's log tree and a Docker container record, as on a node."""
    pod_dir = work / "pods" / f"{NAMESPACE}_{POD}_{POD_UID}" / CONTAINER
    pod_dir.mkdir(parents=True)
    (pod_dir / "0.log").write_text("")
    (work / "containers").mkdir()
    (work / "containers" / f"{POD}_{NAMESPACE}_{CONTAINER}-{K8S_CID}.log").symlink_to(
        pod_dir / "0.log")
    record = work / "docker" / "containers" / DOCKER_CID / "config.v2.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"ID": DOCKER_CID, "Name": f"/{DOCKER_NAME}"}))


def gpu_uuid(fake: bool) -> str:
    if fake:
        return FAKE_UUID
    import pynvml  # noqa: PLC0415

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def exporter_command(fake: bool, port: int, flags: list[str], pids: list[int]) -> list[str]:
    common = ["--web.listen-address", f"127.0.0.1:{port}", *flags]
    if not fake:
        return [sys.executable, "-m", "exporter", "--source", "nvml", *common]
    launcher = (
        "import sys\n"
        "from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200\n"
        "fake = FakeNvml([h200(0, memory_used=7 << 30)])\n"
        f"fake.gpus[0].compute = [FakeProcess(pid=p, used_memory=1 << 30) for p in {pids!r}]\n"
        "sys.modules['pynvml'] = fake\n"
        "from exporter.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    return [sys.executable, "-c", launcher, "--source", "nvml", *common]


def scrape(base: str) -> list[Any]:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        body = response.read().decode()
    return [s for family in text_string_to_metric_families(body) for s in family.samples]


def find(samples: list[Any], name: str, **labels: str) -> list[Any]:
    return [s for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def wait_for(base: str, exporter: subprocess.Popen[bytes], uuid: str, pids: list[int],
             seconds: float = 60) -> list[Any]:
    """Scrape until the allocation and every process are there (or the time is up)."""
    deadline = time.monotonic() + seconds
    samples: list[Any] = []
    while time.monotonic() < deadline and exporter.poll() is None:
        try:
            samples = scrape(base)
        except OSError:
            time.sleep(0.5)
            continue
        have = {s.labels.get("pid") for s in find(samples, "gpu_process_memory_used_bytes")}
        if find(samples, "gpu_allocation_info", uuid=uuid) and all(
                str(pid) in have for pid in pids):
            return samples
        time.sleep(0.5)
    return samples


def compare_exporter(samples: list[Any], uuid: str, by_name: dict[str, Case]) -> None:
    alloc = find(samples, "gpu_allocation_info", uuid=uuid)
    check("allocation series for the GPU's UUID", len(alloc) == 1 and alloc[0].value == 1
          and (alloc[0].labels.get("namespace"), alloc[0].labels.get("pod"),
               alloc[0].labels.get("container")) == (NAMESPACE, POD, CONTAINER),
          str([s.labels for s in alloc]))
    want = {
        "kubernetes": {"namespace": NAMESPACE, "pod": POD, "container": CONTAINER,
                       "slurm_job": ""},
        "slurm": {"slurm_job": SLURM_JOB, "namespace": "", "pod": "", "container": ""},
        "docker": {"container": DOCKER_NAME, "container_id": DOCKER_CID[:12], "pod": "",
                   "slurm_job": ""},
    }
    for name, labels in want.items():
        pid = str(by_name[name].pid)
        rows = find(samples, "gpu_process_memory_used_bytes", pid=pid)
        got = {k: rows[0].labels.get(k, "") for k in labels} if rows else None
        check(f"exporter labels of the {name} process", got == labels,
              f"pid {pid}: got {got}, want {labels}")
    status = find(samples, "gpu_exporter_pod_resources_up")
    check("PodResources poller up", bool(status) and status[0].value == 1,
          str([(s.labels, s.value) for s in status]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="fake NVML and plain processes")
    parser.add_argument("--port", type=int, default=9478)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--json", type=Path, help="write the results here (default $OUT)")
    parser.add_argument("--skip-exporter", action="store_true",
                        help="check the kernel's cgroups and the PodResources client only")
    args = parser.parse_args()
    out = args.json or (Path(os.environ["OUT"]) / "check_attribution.json"
                        if os.environ.get("OUT") else None)
    if not check("running as root", os.geteuid() == 0, "cgroups need root"):
        return 1
    root = cgroup2_root()
    if not check("cgroup v2 hierarchy found", root is not None, str(root)):
        return 1
    assert root is not None
    from exporter.attribution.podresources.client import PodResourcesClient  # noqa: PLC0415
    from tests.fixtures.kubelet import GPU, FakeKubelet, pod  # noqa: PLC0415 (needs grpc)

    uuid = gpu_uuid(args.fake)
    print(f"GPU 0 UUID {uuid}; cgroup v2 root {root}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="attr", dir="/tmp"))
    all_cases = cases()
    kubelet = None
    exporter = None
    log_path = work / "exporter.log"
    try:
        lay_files(work)
        for case in all_cases:
            case.proc = start_process(args.fake, args.gib)
        for case in all_cases:
            assert case.proc is not None
            assert case.proc.stdout is not None
            line = case.proc.stdout.readline().split()
            case.pid = int(line[1]) if len(line) == 2 and line[0] == "ready" else 0
            check(f"{case.name} process started", case.pid > 0, f"pid {case.pid}")
            try:
                make_cgroup(root, case)
            except OSError as err:
                check(f"{case.name} cgroup created", False, f"{root / case.cgroup}: {err}")
        for case in all_cases:
            text = Path(f"/proc/{case.pid}/cgroup").read_text()
            owner = identify(text)
            check(f"kernel cgroup of the {case.name} process parses", owner == case.expected,
                  f"{text.strip()!r} -> {owner}")
        socket_path = str(work / "kubelet.sock")
        kubelet = FakeKubelet(socket_path, [
            pod(NAMESPACE, POD, {CONTAINER: [(GPU, [uuid])]}),
            pod("batch", "cpu-only", {"main": [("cpu", ["0"])]}),
        ]).start()
        table, size = PodResourcesClient(socket_path).list_allocations()
        rows = [(a.namespace, a.pod, a.container) for a in table.by_device.get(uuid, ())]
        check("PodResources client reads the fake kubelet", rows == [(NAMESPACE, POD, CONTAINER)],
              f"{rows}, {size} bytes")
        pids = [case.pid for case in all_cases]
        if not args.skip_exporter:
            with log_path.open("wb") as log:
                exporter = subprocess.Popen(
                    exporter_command(args.fake, args.port, exporter_flags(work, socket_path), pids),
                    stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            base = f"http://127.0.0.1:{args.port}"
            samples = wait_for(base, exporter, uuid, pids)
            check("exporter running", exporter.poll() is None, f"exit {exporter.poll()}")
            compare_exporter(samples, uuid, {case.name: case for case in all_cases})
    finally:
        if exporter is not None:
            exporter.send_signal(signal.SIGTERM)
            try:
                exporter.wait(timeout=15)
            except subprocess.TimeoutExpired:
                exporter.kill()
            print("--- exporter log (tail) ---\n" + log_path.read_text(errors="replace")[-2000:])
        if kubelet is not None:
            kubelet.stop()
        for case in all_cases:
            if case.proc is not None:
                case.proc.kill()
                case.proc.wait(timeout=30)
        remove_cgroups(root, all_cases)
        left = [str(p) for c in all_cases for p in c.created if p.exists()]
        check("created cgroups removed", not left, ", ".join(left))
        shutil.rmtree(work, ignore_errors=True)
    return finish(out, uuid, args.fake)


def finish(out: Path | None, uuid: str, fake: bool) -> int:
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)}/{len(RESULTS)} PASS" + (f"; FAIL: {failed}" if failed
                                                                  else ""))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"results": RESULTS, "uuid": uuid, "fake": fake},
                                  indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
