"""The pod_uid id label (``--kubernetes.pod-uid``): the pod's UID from its cgroup on process,
per-workload and accounting series, after the Kubernetes labels; off by default."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.workloads import WorkloadLabels, select
from exporter.catalogue import metrics
from exporter.catalogue.workloads import KUBERNETES
from exporter.cli import parse_config
from exporter.exposition import snapshot_families
from exporter.snapshot import Workload
from exporter.state import ExpositionOptions
from tests.exposition import factory

UID_A = "5b0f4c2e-1111-4a2b-8c3d-000000000001"
UID_B = "5b0f4c2e-2222-4a2b-8c3d-000000000002"


def test_the_flag_switches_it_on_with_its_environment_variable() -> None:
    assert parse_config(["--source", "nvml", "--kubernetes"], {}).workload_labels.ids == frozenset()
    for argv, environ in ((["--kubernetes.pod-uid"], {}),
                          ([], {"GPU_EXPORTER_KUBERNETES_POD_UID": "true"})):
        labels = parse_config(["--source", "nvml", "--kubernetes", *argv], environ).workload_labels
        assert labels.names == ("namespace", "pod", "container", "pod_uid")
        assert labels.group_by == ("namespace", "pod", "pod_uid")


def test_it_follows_the_pods_labels_and_other_kinds_leave_it_empty() -> None:
    labels = select("kubernetes", "containers", "slurm", ids=frozenset({"pod_uid"}))
    assert labels.names == ("namespace", "pod", "container", "pod_uid", "container_id",
                            "slurm_job")
    in_pod = factory.pod("ml", "train-0", "main", uid=UID_A)
    assert labels.values(in_pod) == ("ml", "train-0", "main", UID_A, "", "")
    container = Workload("containers", {"container": "triton", "container_id": "abc"},
                         {"container_id": "abc" * 20})
    assert labels.values(container) == ("", "", "triton", "", "abc", "")
    assert WorkloadLabels((KUBERNETES,)).values(in_pod) == ("ml", "train-0", "main")
    with pytest.raises(KeyError):
        select("kubernetes", ids=frozenset({"pod_ip"}))


def test_two_pods_of_one_name_stay_apart_in_series_and_accounting() -> None:
    """A StatefulSet's pod replaced by one of the same name: two processes, two UIDs."""
    old = factory.process(100, 1 << 30, user="root", workload=factory.pod("db", "pg-0", "main",
                                                                          uid=UID_A))
    new = factory.process(200, 2 << 30, user="root", workload=factory.pod("db", "pg-0", "main",
                                                                          uid=UID_B))
    snapshot = factory.snapshot(factory.reading(0, (old, new)))
    for ids, rows in ((frozenset({"pod_uid"}), 2), (frozenset(), 1)):
        workloads = WorkloadLabels((KUBERNETES,), ids)
        accounting = IdleAccounting(workloads)
        accounting.enrich(snapshot)
        later = accounting.enrich(replace(snapshot, taken_at=snapshot.taken_at + 15.0))
        assert len(later.accounting) == rows
        families = {f.metric.name: f for f in snapshot_families(
            later, ExpositionOptions(workload_labels=workloads))}
        workload = families[metrics.WORKLOAD_MEMORY.name]
        assert len(workload.rows) == rows
        held = families[metrics.HELD_MEMORY_SECONDS.name]
        assert ("pod_uid" in held.labels) == bool(ids)
        if ids:
            assert {values[-1] for values, _ in held.rows} == {UID_A, UID_B}
