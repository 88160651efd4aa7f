"""Idle accounting in the exporter: what each collection adds to each user's (pod's, job's)
counters, checked against sums worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.attribution.accounting import (
    FORGET_AFTER_SECONDS,
    MAX_GAP_SECONDS,
    IdleAccounting,
)
from exporter.attribution.workloads import select
from exporter.catalogue import metrics, thresholds
from exporter.catalogue.metrics import accounting as counters
from exporter.exposition import snapshot_families
from exporter.snapshot import (
    AccountingRow,
    AllocationRow,
    GpuProcess,
    GpuReading,
    Snapshot,
    Workload,
)
from exporter.state import ExpositionOptions
from tests.exposition import factory

HELD, HELD_GPUS = counters.HELD_MEMORY_SECONDS.name, counters.HELD_GPU_SECONDS.name
IDLE, IDLE_GPUS = counters.IDLE_MEMORY_SECONDS.name, counters.IDLE_GPU_SECONDS.name
USED, ENERGY = counters.USED_GPU_SECONDS.name, counters.ATTRIBUTED_ENERGY.name


def process(pid: int, user: str, memory: int | None, utilization: float | None, *,
            pod: str | None = None, job: str | None = None) -> GpuProcess:
    found = factory.process(pid, memory, user=user, utilization=utilization,
                            workload=factory.pod("ml", pod, uid="uid-" + pod) if pod else None)
    return replace(found, workload=Workload("slurm", {"slurm_job": job})) if job else found


def gpu(index: int, utilization: float | None, power: float | None,
        *processes: GpuProcess, up: bool = True, sm_active: float | None = None) -> GpuReading:
    """A GPU without GPM (``sm_active`` None: its utilisation tells whether it idles)."""
    return factory.reading(index, processes, up=up, utilization_ratio=utilization,
                           power_usage_watts=power, sm_active_ratio=sm_active)


def snapshot(at: float, *gpus: GpuReading) -> Snapshot:
    return Snapshot("nvml", "h1", at, 0.01, gpus=gpus)


def rows(result: Snapshot) -> dict[tuple[str, str, str, str], dict[str, float]]:
    return {(r.user, *(r.workload.get(label, "") for label in ("namespace", "pod", "slurm_job"))):
            dict(r.totals) for r in result.accounting}


#: GPU 0: alice (4 B) idles next to bob (12 B, 80 %), who keeps the GPU busy at 400 W.
#: GPU 1: alice (8 B, 4 %) and carol (8 B, pod nb-0) idle; the GPU idles (4 %) at 100 W.
GPUS = (
    gpu(0, 0.8, 400.0, process(10, "alice", 4, 0.0), process(20, "bob", 12, 0.8, job="77")),
    gpu(1, 0.04, 100.0, process(11, "alice", 8, 0.04), process(30, "carol", 8, 0.0, pod="nb-0")),
)


def test_sm_activity_decides_whether_a_gpu_with_gpm_idles() -> None:
    """With GPM, a GPU spinning one kernel (utilisation 100 %, SM activity 0.5 %) idles, and
    one whose SMs work while NVML's utilisation reads low does not."""
    spinning = gpu(0, 1.0, 150.0, process(10, "alice", 8, 0.0), sm_active=0.005)
    working = gpu(1, 0.02, 600.0, process(11, "bob", 8, 0.0), sm_active=0.6)
    accounting = IdleAccounting()
    accounting.enrich(snapshot(1000.0, spinning, working))
    got = rows(accounting.enrich(snapshot(1010.0, spinning, working)))
    assert got[("alice", "", "", "")][IDLE_GPUS] == pytest.approx(10.0)
    assert got[("bob", "", "", "")][IDLE_GPUS] == 0


def test_first_collection_opens_rows_at_zero_and_the_next_one_accounts_the_interval() -> None:
    accounting = IdleAccounting()
    first = rows(accounting.enrich(snapshot(1000.0, *GPUS)))
    assert set(first) == {("alice", "", "", ""), ("bob", "", "", ""), ("carol", "", "", "")}
    assert all(value == 0.0 for totals in first.values() for value in totals.values())
    got = rows(accounting.enrich(snapshot(1010.0, *GPUS)))
    alice, bob, carol = (got[(user, "", "", "")] for user in ("alice", "bob", "carol"))
    # Held: memory x 10 s; GPU shares by memory (alice 4/16 of GPU 0 and 8/16 of GPU 1).
    assert alice[HELD] == 120
    assert alice[HELD_GPUS] == pytest.approx(7.5)
    assert bob[HELD] == 120
    assert bob[HELD_GPUS] == pytest.approx(7.5)
    assert carol[HELD] == 80
    assert carol[HELD_GPUS] == pytest.approx(5.0)
    # Idle memory: processes under 5 %, wherever they are (alice's 4 B on the busy GPU too).
    assert (alice[IDLE], bob[IDLE], carol[IDLE]) == (120, 0, 80)
    # Idle GPU time: only on the idle GPU 1, in memory shares.
    assert alice[IDLE_GPUS] == pytest.approx(5.0)
    assert carol[IDLE_GPUS] == pytest.approx(5.0)
    assert bob[IDLE_GPUS] == 0
    assert (alice[USED], bob[USED], carol[USED]) == pytest.approx((0.4, 8.0, 0.0))
    # Energy: GPU 0's 400 W all bob's (SM share); GPU 1's 100 W alice's (carol ran nothing).
    assert (alice[ENERGY], bob[ENERGY], carol[ENERGY]) == pytest.approx((1000.0, 4000.0, 0.0))


def test_the_idle_threshold_is_strict_and_shared() -> None:
    """At the threshold a process (and a GPU) is busy; just under it, idle."""
    ratio = thresholds.IDLE_UTILIZATION_RATIO
    for utilization, idle in ((ratio, False), (ratio - 1e-9, True)):
        accounting = IdleAccounting()
        one = gpu(0, utilization, None, process(1, "alice", 10, utilization))
        accounting.enrich(snapshot(0.0, one))
        (totals,) = rows(accounting.enrich(snapshot(1.0, one))).values()
        assert totals[IDLE] == (10 if idle else 0)
        assert totals[IDLE_GPUS] == (1.0 if idle else 0)
        assert ENERGY not in totals  # no power reading: no energy, not 0


def test_pods_and_jobs_are_rows_only_when_their_labels_are_on() -> None:
    accounting = IdleAccounting(select("kubernetes", "slurm"))
    accounting.enrich(snapshot(0.0, *GPUS))
    got = rows(accounting.enrich(snapshot(2.0, *GPUS)))
    assert set(got) == {("alice", "", "", ""), ("bob", "", "", "77"),
                        ("carol", "ml", "nb-0", "")}


def test_a_job_given_a_gpu_it_runs_nothing_on_holds_it_idle() -> None:
    """Slurm gave job 88 (dave) GPUs 2 and 3 and job 89 (erin) GPU 3 too; nothing runs on
    either: the GPUs are held idle by the jobs (split on GPU 3), with their power. Job 77's
    allocation of GPU 0 adds nothing: its processes are accounted as usual. Kubernetes
    allocations (no user) and MIG devices are not accounted this way."""
    def job(gpu_reading: GpuReading, job_id: str, user: str, instance: str = "",
            namespace: str = "") -> AllocationRow:
        return AllocationRow(str(gpu_reading.identity.index), gpu_reading.identity.uuid,
                             gpu_reading.identity.uuid, instance, "gres/gpu", namespace,
                             "p" if namespace else "", "", "exclusive", slurm_job=job_id,
                             user=user, uid="")
    empty2, empty3 = gpu(2, 0.0, 60.0), gpu(3, 0.0, 80.0)
    empty4 = gpu(4, 0.0, 70.0)
    allocations = (job(GPUS[0], "77", "bob"), job(empty2, "88", "dave"),
                   job(empty3, "88", "dave"), job(empty3, "89", "erin"),
                   job(empty4, "", "", namespace="ml"), job(empty4, "90", "frank", instance="7"))
    accounting = IdleAccounting(select("slurm"))
    taken = replace(snapshot(0.0, *GPUS, empty2, empty3, empty4), allocations=allocations)
    accounting.enrich(taken)
    got = rows(accounting.enrich(replace(taken, taken_at=10.0)))
    dave, erin = got[("dave", "", "", "88")], got[("erin", "", "", "89")]
    assert (dave[HELD_GPUS], dave[IDLE_GPUS], dave[ENERGY]) == pytest.approx((15.0, 15.0, 1000.0))
    assert (erin[HELD_GPUS], erin[IDLE_GPUS], erin[ENERGY]) == pytest.approx((5.0, 5.0, 400.0))
    assert (dave[HELD], dave[IDLE], dave[USED]) == (0, 0, 0)
    assert got[("bob", "", "", "77")][HELD_GPUS] == pytest.approx(7.5)  # its process only
    assert {user for user, *_ in got} == {"alice", "bob", "carol", "dave", "erin"}


def test_a_process_without_samples_is_neither_idle_nor_used_and_gaps_are_capped() -> None:
    accounting = IdleAccounting()
    quiet = gpu(0, 0.0, 50.0, process(1, "alice", 10, None))
    accounting.enrich(snapshot(0.0, quiet))
    (totals,) = rows(accounting.enrich(snapshot(1e4, quiet))).values()
    assert totals[HELD] == 10 * MAX_GAP_SECONDS  # a long gap counts as the cap
    assert (totals[IDLE], totals[IDLE_GPUS], totals[USED]) == (0, 0, 0)


def test_counters_only_grow_and_rows_without_processes_are_forgotten() -> None:
    accounting = IdleAccounting()
    accounting.enrich(snapshot(0.0, *GPUS))
    accounting.enrich(snapshot(10.0, *GPUS))
    alone = gpu(0, 0.8, 400.0, process(20, "bob", 12, 0.8))
    down = gpu(1, None, None, up=False)
    later = rows(accounting.enrich(snapshot(20.0, alone, down)))
    assert later[("alice", "", "", "")][HELD] == 120  # kept, unchanged, while she has none
    assert later[("bob", "", "", "")][HELD] == 240
    gone = rows(accounting.enrich(snapshot(20.0 + FORGET_AFTER_SECONDS + 1, alone)))
    assert set(gone) == {("bob", "", "", "")}


def test_exposed_as_counters_with_the_labels_switched_on() -> None:
    row = AccountingRow("alice", {"namespace": "ml", "pod": "nb-0", "slurm_job": "77"},
                        {HELD: 5.0, IDLE: 1.0})
    base = Snapshot("nvml", "h1", 0.0, 0.0, accounting=(row,))
    plain = {f.metric.name: f for f in snapshot_families(base, ExpositionOptions())}
    assert plain[HELD].labels == ("user",)
    assert plain[HELD].rows == [(("alice",), 5.0)]
    assert counters.ATTRIBUTED_ENERGY.name not in plain  # no total, no family
    labelled = {f.metric.name: f for f in snapshot_families(
        base, ExpositionOptions(workload_labels=select("kubernetes", "slurm")))}
    assert labelled[IDLE].rows == [(("alice", "ml", "nb-0", "77"), 1.0)]
    off = ExpositionOptions(groups=frozenset({metrics.Group.PROCESSES}))
    names = {f.metric.name for f in snapshot_families(base, off)}
    assert HELD in names  # idle needs process utilisation
    assert IDLE not in names
