"""Tests for exporter.attribution.cgroup: one parser for Kubernetes, Slurm and container layouts."""

from __future__ import annotations

import pytest

from exporter.attribution.cgroup import CgroupIdentity, parse_cgroup
from tests.fixtures.cgroup_layouts import CASES
from tests.fixtures.cgroups import CID_A, UID_A, UID_B


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, expected: CgroupIdentity | None) -> None:
    assert parse_cgroup(text) == expected


def test_every_layout_in_the_docs_has_a_fixture() -> None:
    kinds = {(o.kind, o.runtime) for _, _, o in CASES if o is not None}
    assert {("slurm", None), ("container", "docker"), ("container", "podman"),
            ("container", "containerd"), ("container", "cri-o"), ("kubernetes", "containerd"),
            ("kubernetes", "cri-o"), ("kubernetes", "docker"), ("kubernetes", None)} <= kinds


def test_kubernetes_wins_over_an_inner_runtime_scope_and_other_pods_are_not_mixed() -> None:
    text = (
        f"0::/kubepods/burstable/pod{UID_A.upper()}\n"
        f"3:pids:/kubepods/burstable/pod{UID_B}/{CID_A}\n"
    )
    assert parse_cgroup(text) == CgroupIdentity("kubernetes", UID_A)


def test_garbage_never_raises() -> None:
    for text in ["::::", "0::", "0::/system.slice/slurmstepd.scope", "\x00" * 100,
                 "0::/slurm/uid_x/job_y", "0::/" + "a/" * 5000]:
        assert parse_cgroup(text) is None
