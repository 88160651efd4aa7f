"""Tests for attribution.enrich: owners and pods filled, vanished vs invisible processes, errors."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.attribution import owners
from exporter.attribution.enrich import ProcessEnricher, merge_errors
from exporter.attribution.kubernetes import PodResolver
from exporter.attribution.owners import OwnerResolver
from exporter.catalogue.workloads import CONTAINERS, KUBERNETES, SLURM
from exporter.health import MigDevice
from exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuReading,
    ProcessOwner,
    ProcessType,
    Snapshot,
    Workload,
)
from tests.fixtures.cgroups import CID_A, UID_A
from tests.fixtures.fakeproc import write_boot, write_kubelet_logs, write_process

PASSWD = Path(__file__).parent.parent / "fixtures" / "host_passwd"
POD_CGROUP = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    f"{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n"
)
PRESET_OWNER = ProcessOwner(uid=5, user="sim", name="fake", start_time_seconds=1.0)


def gpu(index: int, *pids: int, up: bool = True) -> GpuReading:
    identity = GpuIdentity(index=index, uuid=f"GPU-{index:08d}", name="NVIDIA H200",
                           pci_bus_id=f"00000000:{index:02X}:00.0", memory_total_bytes=150 << 30)
    processes = tuple(GpuProcess(pid=pid, type=ProcessType.COMPUTE, used_memory_bytes=pid << 20)
                      for pid in pids)
    return GpuReading(identity=identity, up=up, processes=processes)


def snapshot(*gpus: GpuReading, source: str = "nvml", errors: dict[str, int] | None = None
             ) -> Snapshot:
    return Snapshot(source=source, hostname="node-1", taken_at=1.0, duration_seconds=0.01,
                    gpus=gpus, errors=errors or {})


@pytest.fixture
def node(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    write_boot(proc)
    write_process(proc, 100, uid=1001, comm="train", start_ticks=10, cgroup=POD_CGROUP)
    write_process(proc, 101, uid=0, comm="Xorg", start_ticks=11, cgroup="0::/system.slice\n")
    write_kubelet_logs(tmp_path / "pods", tmp_path / "containers", namespace="ml", pod="job-0",
                       pod_uid=UID_A, containers={"trainer": CID_A})
    return tmp_path


def owner_enricher(node: Path) -> ProcessEnricher:
    return ProcessEnricher(OwnerResolver(procfs=str(node / "proc"), passwd_file=str(PASSWD)))


def pod_resolver(node: Path) -> PodResolver:
    return PodResolver(pod_logs_dir=str(node / "pods"), container_logs_dir=str(node / "containers"))


def pod_enricher(node: Path) -> ProcessEnricher:
    """Owners and pods, as with --kubernetes."""
    return ProcessEnricher(
        OwnerResolver(procfs=str(node / "proc"), passwd_file=str(PASSWD), cgroups=True),
        (KUBERNETES,), {KUBERNETES.name: pod_resolver(node)})


#: What the enricher gives process 100 of the ``node`` fixture (systemd driver, containerd).
TRAINER = Workload("kubernetes", {"namespace": "ml", "pod": "job-0", "container": "trainer"},
                   {"pod_uid": UID_A, "container_id": CID_A, "runtime": "containerd"})


def by_pid(snap: Snapshot, index: int) -> dict[int, GpuProcess]:
    return {p.pid: p for p in snap.gpus[index].processes}


def test_owners_filled_and_input_unchanged(node: Path) -> None:
    before = snapshot(gpu(0, 100, 101), gpu(1, 100), errors={"gpu_lost": 1})
    after = owner_enricher(node).enrich(before)
    assert all(p.owner is None for g in before.gpus for p in g.processes)
    procs = by_pid(after, 0)
    assert procs[100].owner is not None
    assert (procs[100].owner.user, procs[100].owner.name) == ("alice", "train")
    assert procs[101].owner is not None
    assert procs[101].owner.user == "root"
    assert by_pid(after, 1)[100].owner == procs[100].owner
    assert procs[100].used_memory_bytes == 100 << 20  # everything else kept
    assert after.errors == {"gpu_lost": 1}
    assert after.gpus[0].identity == before.gpus[0].identity


def test_invisible_process_stays_unknown_and_is_counted_once(node: Path) -> None:
    # pid 555 has no /proc entry at all (other PID namespace / hidepid=2): keep its memory.
    after = owner_enricher(node).enrich(snapshot(gpu(0, 100, 555), gpu(1, 555)))
    assert by_pid(after, 0)[555].owner is None
    assert by_pid(after, 1)[555].owner is None
    assert by_pid(after, 0)[555].used_memory_bytes == 555 << 20
    assert after.errors == {"owner_lookup": 1}


def test_process_that_exits_mid_collection_is_dropped_silently(node: Path) -> None:
    (node / "proc" / "100" / "status").unlink()  # stat was read, then the process went away
    after = owner_enricher(node).enrich(snapshot(gpu(0, 100, 101), gpu(1, 100), errors={"x": 2}))
    assert list(by_pid(after, 0)) == [101]
    assert after.gpus[1].processes == ()
    assert after.errors == {"x": 2}


def test_process_seen_before_and_gone_now_is_dropped(node: Path) -> None:
    enricher = owner_enricher(node)
    enricher.enrich(snapshot(gpu(0, 100)))
    shutil.rmtree(node / "proc" / "100")
    after = enricher.enrich(snapshot(gpu(0, 100, 101)))
    assert list(by_pid(after, 0)) == [101]
    assert after.errors == {}


def test_permission_denied_stays_unknown_and_counted(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_read = owners.read_small

    def denying(path: str, limit: int = 4096) -> bytes:
        if "/100/" in path:
            raise PermissionError(13, "Permission denied", path)
        return real_read(path, limit)

    monkeypatch.setattr(owners, "read_small", denying)
    after = owner_enricher(node).enrich(snapshot(gpu(0, 100, 101)))
    assert by_pid(after, 0)[100].owner is None
    assert by_pid(after, 0)[101].owner is not None
    assert after.errors == {"owner_lookup": 1}


def test_existing_owners_and_pods_are_left_alone(node: Path) -> None:
    preset_pod = Workload("kubernetes", {"namespace": "", "pod": "", "container": ""})
    reading = gpu(0)
    reading = GpuReading(identity=reading.identity, processes=(
        GpuProcess(pid=100, type=ProcessType.COMPUTE, used_memory_bytes=1,
                   owner=PRESET_OWNER, workload=preset_pod),
        GpuProcess(pid=9999, type=ProcessType.GRAPHICS, used_memory_bytes=2, owner=PRESET_OWNER),
    ))
    after = pod_enricher(node).enrich(snapshot(reading))
    assert after.gpus[0].processes[0].owner == PRESET_OWNER
    assert after.gpus[0].processes[0].workload == preset_pod
    assert after.gpus[0].processes[1].owner == PRESET_OWNER  # pid 9999 not in /proc: kept
    assert after.errors == {}


def test_simulated_snapshots_are_not_looked_up_on_this_host(node: Path) -> None:
    # pid 100 exists in this (fake) host's /proc, but a simulated pid is not that process.
    before = snapshot(gpu(0, 100, 555), source="simulated")
    after = pod_enricher(node).enrich(before)
    assert after == before


def test_one_step_fills_owners_and_pods(node: Path) -> None:
    after = pod_enricher(node).enrich(
        snapshot(gpu(0, 100, 101), gpu(1), gpu(2, 100, up=True))
    )
    procs = by_pid(after, 0)
    assert procs[100].workload == TRAINER
    assert procs[100].owner is not None
    assert procs[101].workload is None  # host process
    assert procs[101].owner is not None
    assert by_pid(after, 2)[100].workload == TRAINER
    assert after.gpus[1].processes == ()


def test_pod_errors_are_merged(node: Path) -> None:
    cgroup = node / "proc" / "100" / "cgroup"
    cgroup.unlink()
    cgroup.mkdir()  # unreadable cgroup file
    after = pod_enricher(node).enrich(
        snapshot(gpu(0, 100), errors={"pod_lookup": 3})
    )
    assert by_pid(after, 0)[100].workload is None
    assert by_pid(after, 0)[100].owner is not None
    assert after.errors == {"pod_lookup": 4}


def test_merge_errors() -> None:
    assert merge_errors({"a": 1, "b": 2}, {"b": 3, "c": 4}) == {"a": 1, "b": 5, "c": 4}
    assert merge_errors({"a": 1}, {"a": 1}, {"a": 1}) == {"a": 3}
    assert merge_errors({}, {}) == {}


def test_warm_collections_read_one_file_per_distinct_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 GPUs x 32 processes (every process on two GPUs): the warm path is one stat per pid."""
    proc = tmp_path / "proc"
    write_boot(proc)
    pids = list(range(2000, 2128))
    for pid in pids:
        write_process(proc, pid, uid=1001, comm="w", start_ticks=pid, cgroup=POD_CGROUP)
    gpus = [gpu(i, *(pids[(i % 4) * 32:(i % 4) * 32 + 32])) for i in range(8)]
    before = snapshot(*gpus)
    enricher = ProcessEnricher(
        OwnerResolver(procfs=str(proc), passwd_file=str(PASSWD), cgroups=True), (KUBERNETES,),
        {KUBERNETES.name: PodResolver(pod_logs_dir=str(tmp_path / "none"),
                                      container_logs_dir=str(tmp_path / "none"))},
    )
    cold = enricher.enrich(before)

    reads: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: int) -> int:  # procfs is read by os.open
        reads.append(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", counting_open)
    warm = enricher.enrich(before)
    assert warm == cold
    assert sorted(reads) == sorted(f"{proc}/{pid}/stat" for pid in pids)
    assert sum(len(g.processes) for g in warm.gpus) == 256
    assert all(p.workload is not None and p.owner is not None
               for g in warm.gpus for p in g.processes)


# --- Slurm jobs, containers outside Kubernetes, kubelet allocations --------------------------
def test_slurm_job_and_container_come_from_the_same_cgroup_read(node: Path) -> None:
    from exporter.attribution.container_names import ContainerNames  # noqa: PLC0415
    from tests.attribution.test_container_names import write_docker  # noqa: PLC0415
    from tests.fixtures.cgroups import CID_B  # noqa: PLC0415

    proc = node / "proc"
    write_process(proc, 200, uid=2001, comm="python", start_ticks=12,
                  cgroup="0::/system.slice/slurmstepd.scope/job_913377/step_0/user/task_0\n")
    write_process(proc, 201, uid=0, comm="triton", start_ticks=13,
                  cgroup=f"0::/system.slice/docker-{CID_B}.scope\n")
    write_docker(node / "docker", CID_B, "triton")
    names = ContainerNames(docker_root=str(node / "docker"), podman_storage=None)
    enricher = ProcessEnricher(
        OwnerResolver(procfs=str(proc), passwd_file=str(PASSWD), cgroups=True),
        (KUBERNETES, CONTAINERS, SLURM),
        {KUBERNETES.name: pod_resolver(node), CONTAINERS.name: names},
    )
    procs = by_pid(enricher.enrich(snapshot(gpu(0, 100, 101, 200, 201))), 0)
    assert procs[200].workload == Workload(
        "slurm", {"slurm_job": "913377"}, {"slurm_job": "913377", "slurm_step": "0"})
    assert procs[201].workload == Workload(
        "containers", {"container": "triton", "container_id": CID_B[:12]},
        {"container_id": CID_B, "runtime": "docker"})
    assert procs[100].workload == TRAINER
    assert procs[101].workload is None


def test_containers_without_names_resolver_are_left_out(node: Path) -> None:
    from tests.fixtures.cgroups import CID_B  # noqa: PLC0415

    write_process(node / "proc", 201, uid=0, comm="triton", start_ticks=13,
                  cgroup=f"0::/system.slice/docker-{CID_B}.scope\n")
    procs = by_pid(pod_enricher(node).enrich(snapshot(gpu(0, 201))), 0)
    assert procs[201].workload is None  # --containers is off


class FakePoller:
    """What the enricher reads from a ``PodResourcesPoller``."""

    def __init__(self, state: object, errors: dict[str, int] | None = None) -> None:
        self._state, self._errors = state, errors or {}

    def state(self) -> object:
        return self._state

    def take_errors(self) -> dict[str, int]:
        errors, self._errors = self._errors, {}
        return errors


def test_allocations_are_joined_with_the_snapshot_gpus(node: Path) -> None:
    from exporter.allocations import (  # noqa: PLC0415
        Allocation,
        AllocationTable,
        parse_device_id,
    )
    from exporter.attribution.podresources.client import (  # noqa: PLC0415
        PodResourcesState,
        PollStatus,
    )

    mig_uuid = "MIG-4b1e5f4c-8f2a-5d3b-9c6e-7a8b9c0d1e2f"
    table = AllocationTable.of([
        Allocation(parse_device_id("GPU-00000001"), "nvidia.com/gpu", "ml", "job-0", "trainer"),
        Allocation(parse_device_id(mig_uuid), "nvidia.com/mig-1g.18gb", "ml", "nb-0", "lab"),
    ])
    ok = FakePoller(PodResourcesState(table, PollStatus.OK), {"pod_resources": 2})
    enricher = ProcessEnricher(
        OwnerResolver(procfs=str(node / "proc"), passwd_file=str(PASSWD)),
        allocations=ok,  # type: ignore[arg-type]
    )
    # GPU 0 is in MIG mode: its MIG device (the id the device plugin hands out) joins with it.
    mig = MigDevice(gpu_instance=7, compute_instance=0, uuid=mig_uuid, profile="1g.18gb")
    after = enricher.enrich(snapshot(replace(gpu(0), mig=(mig,)), gpu(1)))
    assert [(a.gpu, a.uuid, a.gpu_instance, a.pod, a.sharing) for a in after.allocations] == [
        ("1", "GPU-00000001", "", "job-0", "exclusive"),
        ("0", "GPU-00000000", "7", "nb-0", "exclusive")]
    assert after.pod_resources is not None
    assert (after.pod_resources.up, after.pod_resources.status) == (True, "ok")
    assert after.errors["pod_resources"] == 2

    down = FakePoller(PodResourcesState(None, PollStatus.PERMISSION_DENIED, "no"))
    enricher.allocations = down  # type: ignore[assignment]
    after = enricher.enrich(snapshot(gpu(0)))
    assert after.allocations == ()
    assert after.pod_resources is not None
    assert (after.pod_resources.up, after.pod_resources.status) == (False, "permission_denied")
