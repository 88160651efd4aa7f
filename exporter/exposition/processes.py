"""Per-process and per-user families, with the per-GPU series cap and its overflow series.

Cardinality rules (``ExpositionOptions``):
- ``pid_label=False`` drops ``pid``; processes that then share every remaining label value
  (same GPU, process name, user, uid and pod) are summed into one series.
- At most ``max_process_series_per_gpu`` process series per GPU, overflow series included:
  the largest by memory are kept and the rest are summed into one series whose
  pid/process/user/uid (and pod) labels are ``catalogue.OVERFLOW_VALUE``.
- Per-user totals and ``gpu_processes`` count every process, capped or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from exporter import catalogue as cat
from exporter.catalogue import Group
from exporter.exposition.families import FamilyData, family, gpu_label_values
from exporter.snapshot import GpuProcess, GpuReading, Snapshot
from exporter.state import ExpositionOptions

__all__ = ["ProcessSeries", "process_families", "process_label_names", "process_series"]


@dataclass(slots=True)
class ProcessSeries:
    """One per-process series: one process, or several merged/folded into one."""

    labels: tuple[str, ...]  # values of ``process_label_names(options)``
    memory_bytes: int | None = None  # sum over processes with a reading; None if none had one
    utilization_ratio: float | None = None  # sum of samples, at most 1
    start_time_seconds: float | None = None  # the oldest process's start
    processes: int = 0

    def add(self, memory: int | None, utilization: float | None, start: float | None) -> None:
        """Fold one process (or another series' totals) into this series."""
        self.processes += 1
        if memory is not None:
            self.memory_bytes = memory + (self.memory_bytes or 0)
        if utilization is not None:
            # Samples of different processes cover the same period: the sum is a share of it.
            self.utilization_ratio = min(1.0, utilization + (self.utilization_ratio or 0.0))
        if start is not None:
            oldest = self.start_time_seconds
            self.start_time_seconds = start if oldest is None else min(start, oldest)


def process_label_names(options: ExpositionOptions) -> tuple[str, ...]:
    """Label names of per-process series under ``options`` (catalogue order)."""
    names = tuple(n for n in cat.PROCESS_LABELS if options.pid_label or n != "pid")
    return names + cat.KUBERNETES_LABELS if options.kubernetes_labels else names


def _labels(
    gpu: tuple[str, str], process: GpuProcess, options: ExpositionOptions
) -> tuple[str, ...]:
    owner = process.owner
    pid = (str(process.pid),) if options.pid_label else ()
    if owner is None:
        who = (cat.UNKNOWN_VALUE, cat.UNKNOWN_VALUE, cat.UNKNOWN_VALUE)
    else:
        who = (owner.name, owner.user, str(owner.uid))
    if not options.kubernetes_labels:
        return (*gpu, *pid, *who)
    pod = process.pod
    if pod is None:
        return (*gpu, *pid, *who, "", "", "")
    return (*gpu, *pid, *who, pod.namespace or "", pod.pod or "", pod.container or "")


def _overflow_labels(gpu: tuple[str, str], options: ExpositionOptions) -> tuple[str, ...]:
    width = len(process_label_names(options)) - len(gpu)
    return (*gpu, *([cat.OVERFLOW_VALUE] * width))


def process_series(
    gpu: GpuReading, options: ExpositionOptions
) -> tuple[list[ProcessSeries], int]:
    """The capped process series of one GPU and how many processes were folded into overflow."""
    gpu_labels = gpu_label_values(gpu.identity)
    merged: dict[tuple[str, ...], ProcessSeries] = {}
    for proc in gpu.processes:
        key = _labels(gpu_labels, proc, options)
        series = merged.get(key)
        if series is None:
            series = merged[key] = ProcessSeries(key)
        start = proc.owner.start_time_seconds if proc.owner is not None else None
        series.add(proc.used_memory_bytes, proc.sm_utilization_ratio, start)
    cap = max(options.max_process_series_per_gpu, 0)
    if len(merged) <= cap:
        return list(merged.values()), 0  # snapshot order; sorting only matters for the cap
    ordered = sorted(
        merged.values(),
        key=lambda s: (-(s.memory_bytes if s.memory_bytes is not None else -1), s.labels),
    )
    keep = max(cap - 1, 0)  # one slot goes to the overflow series
    kept, folded = ordered[:keep], ordered[keep:]
    overflow = ProcessSeries(_overflow_labels(gpu_labels, options))
    for series in folded:
        overflow.add(series.memory_bytes, series.utilization_ratio, None)
    overflow.processes = sum(s.processes for s in folded)
    if cap > 0:
        kept.append(overflow)
    return kept, overflow.processes


def _user_totals(gpus: Iterable[GpuReading]) -> tuple[FamilyData, FamilyData]:
    memory = family(cat.USER_MEMORY)
    count = family(cat.USER_PROCESSES)
    memory_rows, count_rows = memory.rows, count.rows
    unknown = cat.UNKNOWN_VALUE
    for gpu in gpus:
        labels = gpu_label_values(gpu.identity)
        # Plain dicts, not ProcessSeries: same sums, far less work per process.
        counts: dict[str, int] = {}
        totals: dict[str, int] = {}  # users with at least one memory reading
        for proc in gpu.processes:
            user = proc.owner.user if proc.owner is not None else unknown
            counts[user] = counts.get(user, 0) + 1
            used = proc.used_memory_bytes
            if used is not None:
                totals[user] = used + totals.get(user, 0)
        for user in sorted(counts):
            key = (*labels, user)
            total = totals.get(user)
            if total is not None:
                memory_rows.append((key, total))
            count_rows.append((key, counts[user]))
    return memory, count


def _add_unmerged(
    gpu: GpuReading, options: ExpositionOptions, memory: FamilyData, start: FamilyData,
    util: FamilyData,
) -> bool:
    """Write one series per process when no two share labels and the cap is not reached.

    The common case (``pid`` label on, fewer processes than the cap): the rows equal what
    ``process_series`` gives, without building a ``ProcessSeries`` per process. False (and
    nothing written) when merging or the cap applies.
    """
    processes = gpu.processes
    if not options.pid_label or len(processes) > max(options.max_process_series_per_gpu, 0):
        return False
    gpu_labels = gpu_label_values(gpu.identity)
    if options.kubernetes_labels:
        keys = [_labels(gpu_labels, proc, options) for proc in processes]
    else:  # what _labels gives, inlined: this runs for every process of every snapshot
        unknown = (cat.UNKNOWN_VALUE,) * 3
        keys = [
            (*gpu_labels, str(proc.pid),
             *(unknown if (owner := proc.owner) is None
               else (owner.name, owner.user, str(owner.uid))))
            for proc in processes
        ]
    if len(set(keys)) != len(keys):
        return False  # a repeated pid (odd NVML answer): merge as process_series does
    memory_rows, start_rows, util_rows = memory.rows, start.rows, util.rows
    for key, proc in zip(keys, processes, strict=True):
        used = proc.used_memory_bytes
        if used is not None:
            memory_rows.append((key, used + 0))  # "+ 0" as ProcessSeries.add sums
        owner = proc.owner
        if owner is not None and owner.start_time_seconds is not None:
            start_rows.append((key, owner.start_time_seconds))
        ratio = proc.sm_utilization_ratio
        if ratio is not None:
            util_rows.append((key, min(1.0, ratio + 0.0)))
    return True


def process_families(snapshot: Snapshot, options: ExpositionOptions) -> Iterator[FamilyData]:
    """Families of the ``processes`` and ``process_utilization`` groups plus the overflow gauge.

    Only GPUs that are up contribute; families without samples are left out.
    """
    groups = options.groups
    with_processes = Group.PROCESSES in groups
    with_util = Group.PROCESS_UTILIZATION in groups
    if not (with_processes or with_util):
        return
    healthy = [gpu for gpu in snapshot.gpus if gpu.up]
    names = process_label_names(options)
    count = family(cat.PROCESSES)
    memory = family(cat.PROCESS_MEMORY, names)
    start = family(cat.PROCESS_START_TIME, names)
    util = family(cat.PROCESS_UTILIZATION, names)
    overflow = family(cat.PROCESS_SERIES_OVERFLOW)
    for gpu in healthy:
        gpu_labels = gpu_label_values(gpu.identity)
        count.add(gpu_labels, len(gpu.processes))
        if _add_unmerged(gpu, options, memory, start, util):
            overflow.add(gpu_labels, 0)
            continue
        series_list, folded = process_series(gpu, options)
        overflow.add(gpu_labels, folded)
        for series in series_list:
            if series.memory_bytes is not None:
                memory.add(series.labels, series.memory_bytes)
            if series.start_time_seconds is not None:
                start.add(series.labels, series.start_time_seconds)
            if series.utilization_ratio is not None:
                util.add(series.labels, series.utilization_ratio)
    chosen: list[FamilyData] = []
    if with_processes:
        chosen += [count, memory, start, *_user_totals(healthy)]
    if with_util:
        chosen.append(util)
    chosen.append(overflow)
    yield from (family for family in chosen if family.rows)
