"""The workload kinds' cgroup-path parsers (``exporter.catalogue.workloads``): Kubernetes, Slurm
and container layouts, through ``identify``."""

from __future__ import annotations

import pytest

from exporter.catalogue.workloads import CONTAINERS, KINDS, KUBERNETES, CgroupIdentity, identify
from tests.fixtures.cgroup_layouts import CASES, pod, slurm
from tests.fixtures.cgroups import CID_A, UID_A, UID_B


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, expected: CgroupIdentity | None) -> None:
    assert identify(text) == expected


def test_every_kind_and_runtime_has_a_fixture() -> None:
    found = {(o.kind, o.ids.get("runtime")) for _, _, o in CASES if o is not None}
    assert {kind.name for kind in KINDS} <= {kind for kind, _ in found}
    # The runtimes each kind of container names (Kubernetes: also a bare cgroupfs ID).
    assert {(CONTAINERS.name, runtime) for runtime in ("docker", "podman", "containerd",
                                                        "cri-o")} <= found
    assert {(KUBERNETES.name, runtime) for runtime in ("docker", "containerd", "cri-o",
                                                        None)} <= found


def test_kubernetes_wins_over_an_inner_runtime_scope_and_other_pods_are_not_mixed() -> None:
    text = (
        f"0::/kubepods/burstable/pod{UID_A.upper()}\n"
        f"3:pids:/kubepods/burstable/pod{UID_B}/{CID_A}\n"
    )
    assert identify(text) == pod(UID_A)


def test_a_later_line_completes_the_same_pod_only() -> None:
    text = (
        f"0::/kubepods/burstable/pod{UID_A}\n"
        f"3:pids:/kubepods/burstable/pod{UID_A}/{CID_A}\n"
    )
    assert identify(text) == pod(UID_A, CID_A)


def test_a_container_inside_a_slurm_job_is_the_jobs() -> None:
    # podman --cgroups=split inside a job step: the containers kind is a fallback
    text = ("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/"
            f"libpod-payload-{CID_A}\n")
    assert identify(text) == slurm("7", step="0")


def test_garbage_never_raises() -> None:
    for text in ["::::", "0::", "0::/system.slice/slurmstepd.scope", "\x00" * 100,
                 "0::/slurm/uid_x/job_y", "0::/" + "a/" * 5000]:
        assert identify(text) is None
