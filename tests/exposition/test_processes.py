"""Per-process and per-user families: labels, merging, cap and overflow, workload labels."""

from __future__ import annotations

from dataclasses import replace

from exporter.attribution.workloads import select
from exporter.catalogue import metrics as cat
from exporter.catalogue.metrics import Group
from exporter.catalogue.workloads import KUBERNETES
from exporter.exposition.processes import process_families, process_label_names, process_series
from exporter.snapshot import Workload
from exporter.state import ExpositionOptions
from tests.exposition import factory as f
from tests.exposition.parse import collect_text, series, value

MIB = 1024**2
OVER = cat.OVERFLOW_VALUE


def _text(*procs: f.GpuProcess, **options: object) -> str:
    snap = f.snapshot(f.reading(0, tuple(procs)))
    return collect_text(f.state(snap), ExpositionOptions(**options))  # type: ignore[arg-type]


def test_process_series_carry_catalogue_labels() -> None:
    text = _text(f.process(41, 300 * MIB, user="bob", name="train"))
    (labels,) = series(text, cat.PROCESS_MEMORY.name)
    assert tuple(sorted(labels)) == tuple(sorted(cat.PROCESS_LABELS))
    assert labels == {
        "gpu": "0",
        "uuid": f.identity(0).uuid,
        "pid": "41",
        "process": "train",
        "user": "bob",
        "uid": "1001",
    }
    assert value(text, cat.PROCESS_MEMORY.name, pid="41") == 300 * MIB
    assert value(text, cat.PROCESS_UTILIZATION.name, pid="41") == 0.25
    assert value(text, cat.PROCESS_START_TIME.name, pid="41") == 1_700_000_041.0


def test_unknown_owner_and_missing_memory() -> None:
    text = _text(f.process(5, None, user=None), f.process(6, 10 * MIB, utilization=None))
    assert value(text, cat.PROCESSES.name, gpu="0") == 2
    assert value(text, cat.PROCESS_MEMORY.name, pid="5") is None
    (unknown,) = [s for s in series(text, cat.PROCESS_UTILIZATION.name) if s["pid"] == "5"]
    assert unknown["user"] == unknown["uid"] == unknown["process"] == cat.UNKNOWN_VALUE
    assert value(text, cat.PROCESS_START_TIME.name, pid="5") is None
    assert value(text, cat.PROCESS_UTILIZATION.name, pid="6") is None
    assert value(text, cat.USER_PROCESSES.name, user=cat.UNKNOWN_VALUE) == 1
    # No memory reading for the unknown user's only process: no memory series for it.
    assert value(text, cat.USER_MEMORY.name, user=cat.UNKNOWN_VALUE) is None
    assert value(text, cat.USER_MEMORY.name, user="alice") == 10 * MIB


def test_idle_gpu_has_explicit_zero_processes() -> None:
    snap = f.snapshot(f.reading(0), f.reading(1, (f.process(1, MIB),)))
    text = collect_text(f.state(snap), ExpositionOptions())
    assert value(text, cat.PROCESSES.name, gpu="0") == 0
    assert value(text, cat.PROCESSES.name, gpu="1") == 1
    assert value(text, cat.PROCESS_SERIES_OVERFLOW.name, gpu="0") == 0


def test_without_pid_label_same_process_user_are_summed() -> None:
    procs = (
        f.process(1, 100 * MIB, name="worker", utilization=0.25),
        f.process(2, 50 * MIB, name="worker", utilization=0.5, start=1_600_000_000.0),
        f.process(3, 7 * MIB, name="worker", user="bob"),
        f.process(4, None, name="other"),
    )
    text = _text(*procs, pid_label=False)
    memory = series(text, cat.PROCESS_MEMORY.name)
    assert all("pid" not in labels for labels in memory)
    assert value(text, cat.PROCESS_MEMORY.name, process="worker", user="alice") == 150 * MIB
    assert value(text, cat.PROCESS_UTILIZATION.name, process="worker", user="alice") == 0.75
    # the oldest start of the merged processes
    assert value(text, cat.PROCESS_START_TIME.name, process="worker", user="alice") == (
        1_600_000_002.0
    )
    assert value(text, cat.PROCESS_MEMORY.name, process="worker", user="bob") == 7 * MIB
    assert value(text, cat.PROCESS_MEMORY.name, process="other") is None
    assert value(text, cat.PROCESSES.name, gpu="0") == 4


def test_merged_utilization_never_exceeds_one() -> None:
    procs = [f.process(p, MIB, name="w", utilization=0.7) for p in (1, 2)]
    assert value(_text(*procs, pid_label=False), cat.PROCESS_UTILIZATION.name) == 1.0


def test_cap_keeps_the_largest_and_folds_the_rest() -> None:
    procs = [f.process(pid, pid * MIB, utilization=0.1) for pid in range(1, 11)]
    text = _text(*procs, max_process_series_per_gpu=4)
    memory = series(text, cat.PROCESS_MEMORY.name)
    assert len(memory) == 4
    kept = sorted(int(s["pid"]) for s in memory if s["pid"] != OVER)
    assert kept == [8, 9, 10]
    (overflow,) = [s for s in memory if s["pid"] == OVER]
    assert overflow["process"] == overflow["user"] == overflow["uid"] == OVER
    assert value(text, cat.PROCESS_MEMORY.name, pid=OVER) == sum(range(1, 8)) * MIB
    assert value(text, cat.PROCESS_UTILIZATION.name, pid=OVER) == 0.7
    assert value(text, cat.PROCESS_START_TIME.name, pid=OVER) is None
    assert value(text, cat.PROCESS_SERIES_OVERFLOW.name, gpu="0") == 7
    # Per-user totals and the process count are over all ten processes.
    assert value(text, cat.USER_MEMORY.name, user="alice") == sum(range(1, 11)) * MIB
    assert value(text, cat.USER_PROCESSES.name, user="alice") == 10
    assert value(text, cat.PROCESSES.name) == 10


def test_under_or_at_the_cap_nothing_is_folded() -> None:
    procs = [f.process(pid, pid * MIB) for pid in range(1, 5)]
    text = _text(*procs, max_process_series_per_gpu=4)
    assert len(series(text, cat.PROCESS_MEMORY.name)) == 4
    assert value(text, cat.PROCESS_MEMORY.name, pid=OVER) is None
    assert value(text, cat.PROCESS_SERIES_OVERFLOW.name) == 0


def test_cap_counts_processes_not_series_when_pids_are_merged() -> None:
    procs = [f.process(pid, MIB, name=f"job{pid % 3}", user="bob") for pid in range(9)]
    text = _text(*procs, pid_label=False, max_process_series_per_gpu=2)
    assert len(series(text, cat.PROCESS_MEMORY.name)) == 2
    assert value(text, cat.PROCESS_SERIES_OVERFLOW.name) == 6
    assert value(text, cat.PROCESS_MEMORY.name, process=OVER) == 6 * MIB


def test_kubernetes_labels_are_appended() -> None:
    pod = f.pod("ml", "train-0", "main", uid="u1")
    procs = (f.process(1, MIB, workload=pod), f.process(2, MIB))
    text = _text(*procs, workload_labels=select("kubernetes"))
    in_pod = next(s for s in series(text, cat.PROCESS_MEMORY.name) if s["pid"] == "1")
    host = next(s for s in series(text, cat.PROCESS_MEMORY.name) if s["pid"] == "2")
    assert (in_pod["namespace"], in_pod["pod"], in_pod["container"]) == ("ml", "train-0", "main")
    assert (host["namespace"], host["pod"], host["container"]) == ("", "", "")
    names = process_label_names(ExpositionOptions(workload_labels=select("kubernetes"),
                                                  pid_label=False))
    assert names == tuple(n for n in cat.PROCESS_LABELS if n != "pid") + KUBERNETES.labels
    assert "namespace" not in series(_text(*procs), cat.PROCESS_MEMORY.name)[0]


def test_slurm_and_container_labels_are_appended_when_asked_for() -> None:
    box = Workload("containers", {"container": "triton", "container_id": "4f6c2a9e1b7d"},
                   {"container_id": "4f6c2a9e1b7d" + "0" * 52, "runtime": "docker"})
    pod = f.pod("ml", "train-0", "main", uid="u1")
    procs = (replace(f.process(1, MIB), workload=Workload("slurm", {"slurm_job": "913377"})),
             replace(f.process(2, MIB), workload=box), f.process(3, MIB, workload=pod))
    text = _text(*procs, workload_labels=select("slurm", "containers"))
    rows = {s["pid"]: s for s in series(text, cat.PROCESS_MEMORY.name)}
    assert (rows["1"]["slurm_job"], rows["1"]["container"], rows["1"]["container_id"]) == (
        "913377", "", "")
    assert (rows["2"]["slurm_job"], rows["2"]["container"], rows["2"]["container_id"]) == (
        "", "triton", "4f6c2a9e1b7d")
    assert "namespace" not in rows["3"]  # --kubernetes off: the pod is not exposed
    assert rows["3"]["container"] == ""
    both = _text(*procs, workload_labels=select("kubernetes", "containers"))
    rows = {s["pid"]: s for s in series(both, cat.PROCESS_MEMORY.name)}
    assert (rows["2"]["container"], rows["3"]["container"]) == ("triton", "main")
    assert "slurm_job" not in rows["1"]
    workloads = {(s["slurm_job"], s["container"]): s
                 for s in series(text, cat.WORKLOAD_MEMORY.name)}
    assert set(workloads) == {("913377", ""), ("", "triton")}  # host process 3: not a workload
    assert "pid" not in workloads[("913377", "")]
    assert value(text, cat.WORKLOAD_MEMORY.name, slurm_job="913377") == MIB
    names = process_label_names(ExpositionOptions(
        workload_labels=select("kubernetes", "containers", "slurm")))
    assert names[-5:] == ("namespace", "pod", "container", "container_id", "slurm_job")


def test_allocations_are_one_info_series_each() -> None:
    snap = f.fleet(2, 1)
    text = collect_text(f.state(snap), ExpositionOptions(groups=frozenset(Group)))
    found = series(text, cat.ALLOCATION_INFO.name)
    assert [(s["gpu"], s["pod"], s["sharing"]) for s in found] == [
        ("0", "train-0", "exclusive"), ("1", "train-1", "exclusive"), ("1", "", "exclusive")]
    # a Slurm job's allocation: its job, user and uid; the pod labels empty (and vice versa)
    assert {k: found[2][k] for k in ("slurm_job", "user", "uid", "resource", "namespace")} == {
        "slurm_job": "913377", "user": "alice", "uid": "2001", "resource": "gres/gpu",
        "namespace": ""}
    assert (found[0]["slurm_job"], found[0]["user"]) == ("", "")


def test_same_process_in_two_pods_stays_two_series_without_pid() -> None:
    pods = [f.pod("ml", f"p{i}", "c", uid=f"u{i}") for i in (1, 2)]
    procs = [f.process(i, MIB, workload=pods[i - 1]) for i in (1, 2)]
    text = _text(*procs, workload_labels=select("kubernetes"), pid_label=False)
    assert len(series(text, cat.PROCESS_MEMORY.name)) == 2


def test_process_utilization_group_alone() -> None:
    groups = frozenset({Group.INFO, Group.PROCESS_UTILIZATION, Group.EXPORTER})
    text = _text(f.process(1, MIB), groups=groups)
    assert value(text, cat.PROCESS_UTILIZATION.name, pid="1") == 0.25
    assert series(text, cat.PROCESS_MEMORY.name) == []
    assert series(text, cat.USER_MEMORY.name) == []
    no_procs = frozenset({Group.INFO, Group.EXPORTER})
    assert series(_text(f.process(1, MIB), groups=no_procs), cat.PROCESSES.name) == []


def _series_rows(snap: f.Snapshot, options: ExpositionOptions) -> dict[str, list[object]]:
    """Per-process rows as process_series (the merging path) gives them."""
    rows: dict[str, list[object]] = {"memory": [], "start": [], "util": [], "overflow": []}
    for gpu in snap.gpus:
        found, folded = process_series(gpu, options)
        rows["overflow"].append(folded)
        for s in found:
            for key, row in (("memory", cat.PROCESS_MEMORY), ("start", cat.PROCESS_START_TIME),
                             ("util", cat.PROCESS_UTILIZATION)):
                if s.value(row) is not None:
                    rows[key].append((s.labels, s.value(row)))
    return rows


def test_unmerged_fast_path_equals_process_series() -> None:
    pod = f.pod("ml", "p", "c")
    odd = (
        f.process(1, 0, utilization=-0.0, workload=pod),
        f.process(2, None, user=None, utilization=1.5),
        f.process(3, 7 * MIB, utilization=None, name='we"ird\\n'),
    )
    duplicated = (f.process(9, MIB), f.process(9, 2 * MIB))  # same pid twice: merged
    snap = f.snapshot(f.reading(0, odd), f.reading(1, duplicated), f.reading(2))
    metrics = {"memory": cat.PROCESS_MEMORY, "start": cat.PROCESS_START_TIME,
               "util": cat.PROCESS_UTILIZATION, "overflow": cat.PROCESS_SERIES_OVERFLOW}
    for k8s in (False, True):
        options = ExpositionOptions(workload_labels=select(*["kubernetes"][:k8s]),
                                    groups=frozenset(Group))
        found = {d.metric: d.rows for d in process_families(snap, options)}
        expected = _series_rows(snap, options)
        for key, metric in metrics.items():
            got = found[metric]
            want = expected[key]
            if key == "overflow":
                got = [v for _, v in got]
            assert got == want, key
            # equal is not enough: -0.0 and 0.0 are equal but are written differently
            assert [repr(r) for r in got] == [repr(r) for r in want], key
        assert [v for _, v in found[cat.PROCESS_MEMORY] if v == 3 * MIB]  # pid 9 summed


def test_idle_memory_and_busiest_process_per_user() -> None:
    """Idle: over the 1 GiB floor and under 5 % at this collection; at both edges not idle."""
    gib = 1024 * MIB
    text = _text(
        f.process(1, 2 * gib, user="alice", utilization=0.0),  # idle
        f.process(2, 3 * gib, user="alice", utilization=0.049),  # idle
        f.process(3, gib, user="alice", utilization=0.0),  # exactly the floor: not idle
        f.process(4, 2 * gib, user="bob", utilization=0.05),  # exactly the ratio: busy
        f.process(5, 2 * gib, user="carol", utilization=None),  # no sample: neither
        f.process(6, None, user="dave", utilization=0.0),  # no memory reading: not idle
    )
    assert value(text, cat.USER_IDLE_MEMORY.name, user="alice") == 5 * gib
    assert value(text, cat.USER_UTILIZATION_MAX.name, user="alice") == 0.049
    assert value(text, cat.USER_IDLE_MEMORY.name, user="bob") == 0
    assert value(text, cat.USER_UTILIZATION_MAX.name, user="bob") == 0.05
    # A GPU that cannot report process utilisation never looks idle.
    assert value(text, cat.USER_IDLE_MEMORY.name, user="carol") is None
    assert value(text, cat.USER_UTILIZATION_MAX.name, user="carol") is None
    assert value(text, cat.USER_IDLE_MEMORY.name, user="dave") == 0
    (labels, *_) = series(text, cat.USER_IDLE_MEMORY.name)
    assert tuple(sorted(labels)) == tuple(sorted(cat.USER_IDLE_MEMORY.labels))


def test_idle_sums_need_process_utilization() -> None:
    proc = f.process(1, 2048 * MIB, user="alice", utilization=0.0)
    without = _text(proc, groups=frozenset({Group.PROCESSES, Group.EXPORTER}))
    assert series(without, cat.USER_IDLE_MEMORY.name) == []
    assert series(without, cat.USER_UTILIZATION_MAX.name) == []
    assert value(_text(proc), cat.USER_IDLE_MEMORY.name, user="alice") == 2048 * MIB


def test_last_active_series_merged_newest_and_stale_pids_dropped() -> None:
    last = cat.PROCESS_LAST_ACTIVE.name
    text = _text(f.process(7, MIB, last_active=100.0), f.process(8, MIB, last_active=None))
    assert value(text, last, pid="7") == 1_700_000_007.0 + 100.0
    assert value(text, last, pid="8") is None  # no kernel seen: no series
    # Without pid labels, two processes of one name and user share a series: the newest wins.
    merged = _text(f.process(7, MIB, last_active=100.0), f.process(9, MIB, last_active=50.0),
                   pid_label=False)
    assert value(merged, last, process="python") == 1_700_000_007.0 + 100.0
    # A time before the process started belongs to an earlier process with the same pid.
    reused = _text(f.process(7, MIB, last_active=-3600.0))
    assert value(reused, last, pid="7") is None
