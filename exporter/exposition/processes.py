"""Per-process and per-user families, with the per-GPU series cap and its overflow series.

Cardinality rules (``ExpositionOptions``):
- ``pid_label=False`` drops ``pid``; processes that then share every remaining label value
  (same GPU, process name, user, uid and workload) are summed into one series.
- At most ``max_process_series_per_gpu`` process series per GPU, overflow series included:
  the largest by memory are kept and the rest are summed into one series whose
  pid/process/user/uid (and workload) labels are ``metrics.OVERFLOW_VALUE``.
- Per-user totals and ``gpu_processes`` count every process, capped or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from exporter.catalogue import metrics, thresholds
from exporter.catalogue.metrics import PROCESS_ROWS, Fold, Group, Metric, Since
from exporter.catalogue.metrics.allocator import USER_COUNTERS
from exporter.exposition.families import FamilyData, family, gpu_label_values
from exporter.snapshot import GpuProcess, GpuReading, Snapshot
from exporter.state import ExpositionOptions

__all__ = ["ProcessSeries", "process_families", "process_label_names", "process_series"]


def _fold(fold: Fold, total: float | None, value: float) -> float:
    if total is None:
        return min(1.0, value + 0.0) if fold is Fold.SUM_RATIO else value
    if fold is Fold.SUM:
        return value + total
    if fold is Fold.SUM_RATIO:
        # Samples of different processes cover the same period: the sum is a share of it.
        return min(1.0, value + total)
    if fold is Fold.NEWEST:
        return max(value, total)
    return min(value, total)


@dataclass(slots=True)
class ProcessSeries:
    """One per-process series: one process, or several merged/folded into one.

    ``values`` holds one entry per ``PROCESS_ROWS`` row (None: no process had a value).
    """

    labels: tuple[str, ...]  # values of ``process_label_names(options)``
    values: list[float | None] = field(default_factory=lambda: [None] * len(PROCESS_ROWS))
    processes: int = 0

    def add(self, values: list[float | None], folds_oldest: bool = True) -> None:
        """Fold one process's (or another series') row values into this series.

        ``folds_oldest`` False skips ``Fold.OLDEST`` rows (the overflow series has no age).
        """
        self.processes += 1
        for index, row in enumerate(PROCESS_ROWS):
            value = values[index]
            if value is None or (row.fold is Fold.OLDEST and not folds_oldest):
                continue
            self.values[index] = _fold(row.fold, self.values[index], value)

    def value(self, row: Metric) -> float | None:
        """The series' value of one process row."""
        return self.values[PROCESS_ROWS.index(row)]


def _row_values(process: GpuProcess) -> list[float | None]:
    return [row.process_value(process) if row.process_value else None for row in PROCESS_ROWS]


def process_label_names(options: ExpositionOptions) -> tuple[str, ...]:
    """Label names of per-process series under ``options`` (catalogue order)."""
    names = tuple(n for n in metrics.PROCESS_LABELS if options.pid_label or n != "pid")
    return names + options.workload_labels.names


def _labels(
    gpu: tuple[str, str], process: GpuProcess, options: ExpositionOptions
) -> tuple[str, ...]:
    owner = process.owner
    pid = (str(process.pid),) if options.pid_label else ()
    if owner is None:
        who = (metrics.UNKNOWN_VALUE, metrics.UNKNOWN_VALUE, metrics.UNKNOWN_VALUE)
    else:
        who = (owner.name, owner.user, str(owner.uid))
    if not options.workload_labels.kinds:
        return (*gpu, *pid, *who)
    return (*gpu, *pid, *who, *options.workload_labels.values(process.workload))


def _overflow_labels(gpu: tuple[str, str], options: ExpositionOptions) -> tuple[str, ...]:
    width = len(process_label_names(options)) - len(gpu)
    return (*gpu, *([metrics.OVERFLOW_VALUE] * width))


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
        series.add(_row_values(proc))
    cap = max(options.max_process_series_per_gpu, 0)
    if len(merged) <= cap:
        return list(merged.values()), 0  # snapshot order; sorting only matters for the cap
    memory = PROCESS_ROWS.index(metrics.PROCESS_MEMORY)
    ordered = sorted(
        merged.values(),
        key=lambda s: (-(m if (m := s.values[memory]) is not None else -1), s.labels),
    )
    keep = max(cap - 1, 0)  # one slot goes to the overflow series
    kept, folded = ordered[:keep], ordered[keep:]
    overflow = ProcessSeries(_overflow_labels(gpu_labels, options))
    for series in folded:
        overflow.add(series.values, folds_oldest=False)
    overflow.processes = sum(s.processes for s in folded)
    if cap > 0:
        kept.append(overflow)
    return kept, overflow.processes


def _user_figures(gpus: Iterable[GpuReading]) -> list[FamilyData]:
    """Per GPU and user, from one pass over each GPU's processes: memory held and process count
    (group ``processes``); memory of idle holders and the busiest process's utilisation (group
    ``process_utilization``), in that order.

    Processes without a utilisation sample (NVML has none for them) count for neither of the
    last two, so a GPU that cannot report process utilisation never looks idle.
    """
    memory, count = family(metrics.USER_MEMORY), family(metrics.USER_PROCESSES)
    idle, busiest = family(metrics.USER_IDLE_MEMORY), family(metrics.USER_UTILIZATION_MAX)
    unknown = metrics.UNKNOWN_VALUE
    floor, ratio = thresholds.IDLE_PROCESS_MEMORY_BYTES, thresholds.IDLE_UTILIZATION_RATIO
    for gpu in gpus:
        labels = gpu_label_values(gpu.identity)
        counts: dict[str, int] = {}
        totals: dict[str, int] = {}  # users with at least one memory reading
        idle_bytes: dict[str, int] = {}  # users with at least one utilisation sample
        top: dict[str, float] = {}
        for proc in gpu.processes:
            user = proc.owner.user if proc.owner is not None else unknown
            counts[user] = counts.get(user, 0) + 1
            used = proc.used_memory_bytes
            if used is not None:
                totals[user] = used + totals.get(user, 0)
            utilization = proc.sm_utilization_ratio
            if utilization is None:
                continue
            top[user] = max(utilization, top.get(user, 0.0))
            held = used if used is not None and used > floor and utilization < ratio else 0
            idle_bytes[user] = idle_bytes.get(user, 0) + held
        for user in sorted(counts):
            key = (*labels, user)
            total = totals.get(user)
            if total is not None:
                memory.rows.append((key, total))
            count.rows.append((key, counts[user]))
            most = top.get(user)
            if most is not None:
                idle.rows.append((key, idle_bytes[user]))
                busiest.rows.append((key, most))
    return [memory, count, idle, busiest]


def _user_counters(gpus: Iterable[GpuReading]) -> list[FamilyData]:
    """The per-user PyTorch counters ``exporter.attribution.torchtotals`` put on each GPU."""
    found = []
    for row in USER_COUNTERS:
        result = family(row)
        for gpu in gpus:
            by_user = gpu.labelled(row.name)
            if by_user:
                labels = gpu_label_values(gpu.identity)
                result.rows.extend(((*labels, user), count) for user, count in by_user.items())
        found.append(result)
    return found


def _add_unmerged(gpu: GpuReading, options: ExpositionOptions,
                  families: list[FamilyData]) -> bool:
    """Write one series per process when no two share labels and the cap is not reached.

    The common case (``pid`` label on, fewer processes than the cap): the rows equal what
    ``process_series`` gives, without building a ``ProcessSeries`` per process. False (and
    nothing written) when merging or the cap applies. ``families`` is one per
    ``PROCESS_ROWS`` row.
    """
    processes = gpu.processes
    if not options.pid_label or len(processes) > max(options.max_process_series_per_gpu, 0):
        return False
    gpu_labels = gpu_label_values(gpu.identity)
    if options.workload_labels.kinds:
        keys = [_labels(gpu_labels, proc, options) for proc in processes]
    else:  # what _labels gives, inlined: this runs for every process of every snapshot
        unknown = (metrics.UNKNOWN_VALUE,) * 3
        keys = [
            (*gpu_labels, str(proc.pid),
             *(unknown if (owner := proc.owner) is None
               else (owner.name, owner.user, str(owner.uid))))
            for proc in processes
        ]
    if len(set(keys)) != len(keys):
        return False  # a repeated pid (odd NVML answer): merge as process_series does
    groups = options.groups
    for row, target in zip(PROCESS_ROWS, families, strict=True):
        read = row.process_value
        if read is None or row.group not in groups:  # a group that is off: dropped anyway
            continue
        pairs = zip(keys, processes, strict=True)
        if row.fold is Fold.SUM_RATIO:  # as _fold starts a series
            target.rows += [(key, min(1.0, value + 0.0)) for key, proc in pairs
                            if (value := read(proc)) is not None]
        else:
            target.rows += [(key, value) for key, proc in pairs
                            if (value := read(proc)) is not None]
    return True


def _workload_totals(gpus: Iterable[GpuReading], options: ExpositionOptions
                     ) -> tuple[FamilyData, FamilyData]:
    """Memory and summed utilisation per (GPU, workload); processes of no workload are left
    out (they are in the per-user totals)."""
    workloads = options.workload_labels
    names = (*metrics.GPU_LABELS, *workloads.names)
    memory = family(metrics.WORKLOAD_MEMORY, names)
    utilization = family(metrics.WORKLOAD_UTILIZATION, names)
    if not workloads.kinds:
        return memory, utilization
    for gpu in gpus:
        labels = gpu_label_values(gpu.identity)
        used: dict[tuple[str, ...], int] = {}
        busy: dict[tuple[str, ...], float] = {}
        for proc in gpu.processes:
            workload = workloads.values(proc.workload)
            if not any(workload):
                continue
            if proc.used_memory_bytes is not None:
                used[workload] = proc.used_memory_bytes + used.get(workload, 0)
            if proc.sm_utilization_ratio is not None:
                busy[workload] = min(1.0, proc.sm_utilization_ratio + busy.get(workload, 0.0))
        memory.rows.extend(((*labels, *key), total) for key, total in sorted(used.items()))
        utilization.rows.extend(((*labels, *key), share) for key, share in sorted(busy.items()))
    return memory, utilization


def _allocations(snapshot: Snapshot) -> FamilyData:
    """``gpu_allocation_info``: one series per kubelet or Slurm allocation (already unique);
    the workload labels are the row's fields of the same names."""
    allocations = family(metrics.ALLOCATION_INFO)
    workload = metrics.ALLOCATION_WORKLOAD_LABELS
    for row in snapshot.allocations:
        allocations.add((row.gpu, row.uuid, row.device_id, row.gpu_instance, row.resource,
                         *(getattr(row, name) for name in workload), row.sharing), 1.0)
    return allocations


def _process_starts(per_process: list[FamilyData]) -> None:
    """A process's own counters count from its start: their series' ``created`` is the start
    time of the same series (the oldest of a merged series)."""
    starts = dict(per_process[PROCESS_ROWS.index(metrics.PROCESS_START_TIME)].rows)
    for data in per_process:
        if data.metric.since is Since.PROCESS and data.rows:
            data.created = [starts.get(labels) for labels, _ in data.rows]


def _claims(snapshot: Snapshot) -> FamilyData:
    """``gpu_allocation_claim_info``: the DRA claim of each allocation that has one."""
    claims = family(metrics.ALLOCATION_CLAIM_INFO)
    for row in snapshot.allocations:
        claim = row.claim
        if claim is not None:
            claims.add((row.gpu, row.uuid, row.namespace, row.pod, row.container,
                        claim.namespace, claim.name, claim.driver, claim.pool, claim.device), 1.0)
    return claims


def process_families(snapshot: Snapshot, options: ExpositionOptions) -> Iterator[FamilyData]:
    """Families of the ``processes`` and ``process_utilization`` groups plus the overflow gauge.

    Order: ``gpu_processes``, the process rows of ``processes``, the per-user totals, the
    kubelet's allocations, the process rows of ``process_utilization`` (and ``torch``), the
    per-user idle figures and PyTorch counters, the overflow gauge.
    Only GPUs that are up contribute; families without samples are left out.
    """
    groups = options.groups
    with_processes = Group.PROCESSES in groups
    if not (with_processes or Group.PROCESS_UTILIZATION in groups):
        return
    healthy = [gpu for gpu in snapshot.gpus if gpu.up]
    names = process_label_names(options)
    count = family(metrics.PROCESSES)
    per_process = [family(row, names) for row in PROCESS_ROWS]
    overflow = family(metrics.PROCESS_SERIES_OVERFLOW)
    for gpu in healthy:
        gpu_labels = gpu_label_values(gpu.identity)
        count.add(gpu_labels, len(gpu.processes))
        if _add_unmerged(gpu, options, per_process):
            overflow.add(gpu_labels, 0)
            continue
        series_list, folded = process_series(gpu, options)
        overflow.add(gpu_labels, folded)
        for series in series_list:
            for index, target in enumerate(per_process):
                value = series.values[index]
                if value is not None:
                    target.add(series.labels, value)
    _process_starts(per_process)
    workload_memory, workload_utilization = _workload_totals(healthy, options)
    user_memory, user_count, user_idle, user_busiest = _user_figures(healthy)
    chosen: list[FamilyData] = []
    if with_processes:
        chosen += [count, *(f for f in per_process if f.metric.group is Group.PROCESSES),
                   user_memory, user_count, workload_memory, _allocations(snapshot),
                   _claims(snapshot)]
    chosen += [f for f in per_process if f.metric.group is not Group.PROCESSES
               and f.metric.group in groups]
    if Group.PROCESS_UTILIZATION in groups:
        chosen += [workload_utilization, user_idle, user_busiest]
    if Group.TORCH in groups:
        chosen += _user_counters(healthy)
    chosen.append(overflow)
    yield from (result for result in chosen if result.rows)
