"""Tests for the pods' cgroup parsing (``exporter.catalogue.workloads``) and
``exporter.attribution.kubernetes``: the log tree."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from exporter.attribution.kubernetes import (
    PodResolver,
    parse_container_log_name,
    parse_pod_log_dir_name,
)
from exporter.attribution.owners import read_cgroup
from exporter.attribution.workloads import workload
from exporter.catalogue.workloads import KUBERNETES, identify
from tests.fixtures.cgroups import CID_A, CID_B, CID_C, UID_A, UID_B, UID_C, V1_HOST
from tests.fixtures.fakeproc import write_boot, write_kubelet_logs, write_process
from tests.scheduler_fakes import FakeClock


def test_parse_container_log_name() -> None:
    assert parse_container_log_name(f"job-0_ml_trainer-{CID_A}.log") == (
        CID_A, "ml", "job-0", "trainer"
    )
    assert parse_container_log_name(f"a-b-c_kube-system_side-car-{CID_B}.log") == (
        CID_B, "kube-system", "a-b-c", "side-car"
    )
    for bad in [
        f"job-0_ml_trainer-{CID_A}.log.1",
        f"job-0_ml_trainer-{CID_A[:-1]}.log",
        f"job-0_trainer-{CID_A}.log",
        f"__-{CID_A}.log",
        "x.log",
        "",
    ]:
        assert parse_container_log_name(bad) is None, bad


def test_parse_pod_log_dir_name() -> None:
    assert parse_pod_log_dir_name(f"ml_job-0_{UID_A}") == (UID_A, "ml", "job-0")
    assert parse_pod_log_dir_name(f"ml_job-0_{UID_A}_x") is None
    assert parse_pod_log_dir_name("ml_job-0_not-a-uid") is None
    assert parse_pod_log_dir_name(f"_job-0_{UID_A}") is None


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A node: proc with one pod process, one unnamed-pod process and one host process."""
    proc = tmp_path / "proc"
    write_boot(proc)
    systemd_a = UID_A.replace("-", "_")
    write_process(proc, 10, uid=0, comm="trainer", start_ticks=1,
                  cgroup=f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                         f"{systemd_a}.slice/cri-containerd-{CID_A}.scope\n")
    write_process(proc, 11, uid=0, comm="other", start_ticks=1,
                  cgroup=f"12:memory:/kubepods/besteffort/pod{UID_C}/{CID_C}\n")
    write_process(proc, 12, uid=0, comm="Xorg", start_ticks=1, cgroup=V1_HOST)
    write_kubelet_logs(tmp_path / "pods", tmp_path / "containers", namespace="ml", pod="job-0",
                       pod_uid=UID_A, containers={"trainer": CID_A, "sidecar": CID_B})
    return tmp_path


class PodRef(NamedTuple):
    """What the enricher learns of a pod's process (None: a name the log tree does not give)."""

    pod_uid: str
    container_id: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None


class Resolver:
    """Reads a pid's cgroup from the fake tree and names it, as the enricher does."""

    def __init__(self, procfs: Path, pods: PodResolver) -> None:
        self.procfs, self.pods = str(procfs), pods

    def resolve(self, pid: int) -> PodRef | None:
        identity = identify(read_cgroup(self.procfs, pid))
        if identity is None or identity.kind != KUBERNETES.name:
            return None
        found = workload(KUBERNETES, identity, self.pods)
        ids, labels = found.ids, found.labels
        return PodRef(ids["pod_uid"], ids.get("container_id"), labels["namespace"] or None,
                      labels["pod"] or None, labels["container"] or None)

    def take_errors(self) -> dict[str, int]:
        return self.pods.take_errors()


def make_resolver(tree: Path, clock: FakeClock | None = None) -> Resolver:
    return Resolver(tree / "proc", PodResolver(
        pod_logs_dir=str(tree / "pods"),
        container_logs_dir=str(tree / "containers"),
        clock=clock or FakeClock(),
    ))


def test_resolves_names_from_the_log_tree(tree: Path) -> None:
    resolver = make_resolver(tree)
    assert resolver.resolve(10) == PodRef(
        pod_uid=UID_A, container_id=CID_A, namespace="ml", pod="job-0", container="trainer"
    )
    assert resolver.resolve(12) is None  # host process
    assert resolver.resolve(11) == PodRef(pod_uid=UID_C, container_id=CID_C)  # no logs for it
    assert resolver.take_errors() == {}


def test_pod_dir_alone_gives_namespace_and_pod(tree: Path) -> None:
    shutil.rmtree(tree / "containers")
    assert make_resolver(tree).resolve(10) == PodRef(
        pod_uid=UID_A, container_id=CID_A, namespace="ml", pod="job-0", container=None
    )


def test_logs_not_mounted_gives_ids_only_without_errors(tree: Path) -> None:
    shutil.rmtree(tree / "containers")
    shutil.rmtree(tree / "pods")
    resolver = make_resolver(tree)
    assert resolver.resolve(10) == PodRef(pod_uid=UID_A, container_id=CID_A)
    assert resolver.take_errors() == {}


def test_unreadable_log_dir_is_counted(tree: Path) -> None:
    shutil.rmtree(tree / "containers")
    (tree / "containers").write_text("not a directory")
    resolver = make_resolver(tree)
    assert resolver.resolve(10) == PodRef(UID_A, CID_A, "ml", "job-0", None)
    assert resolver.take_errors() == {"pod_lookup": 1}


def test_new_pods_appear_after_the_miss_interval(tree: Path) -> None:
    clock = FakeClock()
    resolver = make_resolver(tree, clock)
    assert resolver.resolve(11) == PodRef(UID_C, CID_C)
    write_kubelet_logs(tree / "pods", tree / "containers", namespace="batch", pod="etl",
                       pod_uid=UID_C, containers={"main": CID_C})
    clock.now += 0.5
    assert resolver.resolve(11) == PodRef(UID_C, CID_C)  # listed 0.5 s ago: not re-listed yet
    clock.now += 2.0
    assert resolver.resolve(11) == PodRef(UID_C, CID_C, "batch", "etl", "main")


def test_listings_are_not_repeated_on_hits(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[str] = []
    real_scandir = os.scandir

    def counting(path: str) -> object:
        listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    clock = FakeClock()
    resolver = make_resolver(tree, clock)
    for _ in range(10):
        clock.now += 1
        assert resolver.resolve(10) is not None
    assert len(listed) == 2  # both directories once
    clock.now += 30
    resolver.resolve(10)
    assert len(listed) == 4  # TTL expired: re-listed


def test_missing_process_raises_file_not_found(tree: Path) -> None:
    with pytest.raises(FileNotFoundError):
        make_resolver(tree).resolve(4321)


def test_own_process_via_the_real_proc_is_not_a_pod() -> None:
    with open("/proc/self/cgroup") as handle:
        in_pod = "kubepods" in handle.read()
    identity = identify(read_cgroup("/proc", os.getpid()))
    assert (identity is not None and identity.kind == "kubernetes") == in_pod


def test_crio_and_two_containers_of_one_pod(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    systemd_b = UID_B.replace("-", "_")
    for pid, cid in [(20, CID_A), (21, CID_B)]:
        write_process(proc, pid, uid=0, comm="c", start_ticks=1,
                      cgroup=f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                             f"pod{systemd_b}.slice/crio-{cid}.scope\n")
    write_kubelet_logs(tmp_path / "pods", tmp_path / "containers", namespace="team-a",
                       pod="infer-7f9c", pod_uid=UID_B, containers={"model": CID_A, "proxy": CID_B})
    resolver = Resolver(proc, PodResolver(pod_logs_dir=str(tmp_path / "pods"),
                                          container_logs_dir=str(tmp_path / "containers")))
    assert resolver.resolve(20) == PodRef(UID_B, CID_A, "team-a", "infer-7f9c", "model")
    assert resolver.resolve(21) == PodRef(UID_B, CID_B, "team-a", "infer-7f9c", "proxy")
