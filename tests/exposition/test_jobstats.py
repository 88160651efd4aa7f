"""The ``jobstats`` group: Jobstats' series per GPU and MIG device, with one label set for every
row (Jobstats joins them on all labels) and the job of the device's Slurm allocation."""

from __future__ import annotations

from dataclasses import replace

from exporter.catalogue import metrics
from exporter.catalogue.metrics import JOBSTATS_LABELS, Group, default_groups
from exporter.exposition.jobstats import jobstats_families
from exporter.health import MigDevice
from exporter.snapshot import AllocationRow
from exporter.state import ExpositionOptions
from tests.exposition import factory as f
from tests.exposition.parse import collect_text, series

GIB = 1024**3


def _job(gpu: str, uuid: str, device: str, job: str, *, uid: str = "2001",
         instance: str = "") -> AllocationRow:
    return AllocationRow(gpu, uuid, device, instance, "gres/gpu", "", "", "", "exclusive",
                         slurm_job=job, user="alice", uid=uid)


def _snapshot():  # type: ignore[no-untyped-def]
    mig = MigDevice(gpu_instance=7, compute_instance=0, uuid="MIG-77", profile="1g.18gb",
                    memory_used_bytes=2 * GIB, memory_total_bytes=18 * GIB)
    first = replace(f.reading(0), identity=replace(f.reading(0).identity, minor_number=3))
    second = replace(f.reading(1, utilization_ratio=None), mig=(mig,))
    third = replace(f.reading(2), identity=replace(f.reading(2).identity, minor_number=None))
    down = f.reading(3, up=False)
    snap = f.snapshot(first, second, third, down)
    pod = AllocationRow("2", third.identity.uuid, third.identity.uuid, "", "nvidia.com/gpu",
                        "ml", "p", "c", "exclusive")
    return replace(snap, allocations=(
        _job("0", first.identity.uuid, first.identity.uuid, "913377"),
        _job("1", second.identity.uuid, "MIG-77", "913402", uid="", instance="7"), pod))


def test_every_row_has_one_label_set_and_the_job_of_its_device() -> None:
    text = collect_text(f.state(_snapshot()), ExpositionOptions(groups=frozenset(Group)))
    for row in metrics.JOBSTATS_ROWS:
        for labels in series(text, row.name):
            assert set(labels) <= set(JOBSTATS_LABELS)
    duty = {s["uuid"]: s for s in series(text, metrics.JOBSTATS_DUTY_CYCLE.name)}
    first, _, third = (f.reading(i).identity.uuid for i in range(3))
    assert set(duty) == {first, third}  # GPU 1 is in MIG mode (no utilisation), GPU 3 down
    assert (duty[first]["minor_number"], duty[first]["ordinal"], duty[first]["jobid"],
            duty[first]["userid"]) == ("3", "0", "913377", "2001")
    assert (duty[third]["minor_number"], duty[third]["jobid"]) == ("", "")  # a pod's GPU
    jobs = {s["uuid"]: s for s in series(text, metrics.JOBSTATS_JOB_ID.name)}
    assert set(jobs) == {first, "MIG-77"}
    assert (jobs["MIG-77"]["GPU_I_ID"], jobs["MIG-77"]["name"], jobs["MIG-77"]["ordinal"]) == (
        "7", "NVIDIA H200 MIG 1g.18gb", "1")
    assert {s["uuid"] for s in series(text, metrics.JOBSTATS_JOB_UID.name)} == {first}  # no uid


def test_values_are_the_native_rows_in_the_peers_units() -> None:
    snap = _snapshot()
    families = {fam.metric.name: {r[0][2]: r[1] for r in fam.rows}
                for fam in jobstats_families(snap, frozenset(Group))}
    first = snap.gpus[0]
    uuid = first.identity.uuid
    assert families[metrics.JOBSTATS_DUTY_CYCLE.name][uuid] == first.value(
        metrics.UTILIZATION.name) * 100
    assert families[metrics.JOBSTATS_POWER.name][uuid] == first.value(
        metrics.POWER_USAGE.name) * 1000
    assert families[metrics.JOBSTATS_JOB_ID.name][uuid] == 913377.0
    assert families[metrics.JOBSTATS_MEMORY_USED.name]["MIG-77"] == 2 * GIB
    assert families[metrics.JOBSTATS_MEMORY_TOTAL.name]["MIG-77"] == 18 * GIB
    assert families[metrics.JOBSTATS_TEMPERATURE.name]["MIG-77"] == snap.gpus[1].value(
        metrics.TEMPERATURE.name)  # the parent's


def test_off_by_default() -> None:
    assert Group.JOBSTATS not in default_groups()
    assert jobstats_families(_snapshot(), default_groups()) == []
