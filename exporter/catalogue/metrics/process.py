"""Per-process and per-user metric rows (group ``processes`` / ``process_utilization``).

A ``Scope.PROCESS`` row is one series per process: ``process_value`` reads it from a
``GpuProcess`` and ``fold`` says how processes sharing a series (no ``pid`` label, the overflow
series) combine. ``Scope.GPU_SUMMARY`` rows are counted or summed from a GPU's process list in
``exporter.exposition.processes``.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    PROCESS_LABELS,
    Fold,
    Group,
    Kind,
    Metric,
    ProcessView,
    Scope,
)

#: ``GpuProcess.values`` key of the last-active time (filled by the sources).
LAST_ACTIVE = "gpu_process_last_active_timestamp_seconds"


def last_active_seconds(process: ProcessView) -> float | None:
    """The process's last-active time, unless it predates the process (a sample of an earlier
    process with the same pid, still in NVML's buffer after an exporter restart)."""
    value = process.values.get(LAST_ACTIVE)
    owner = process.owner
    if value is None or (owner is not None and value < owner.start_time_seconds - 1.0):
        return None
    return value


def _per_process(name: str, group: Group, help_text: str, *,
                 process_value: Callable[[ProcessView], float | None], fold: Fold,
                 json_field: str, json_type: type[float] | type[int] = float) -> Metric:
    """A ``Scope.PROCESS`` gauge: one series per process, read by ``process_value``."""
    return Metric(name, Kind.GAUGE, group, help_text, labels=PROCESS_LABELS, scope=Scope.PROCESS,
                  process_value=process_value, fold=fold, json_field=json_field,
                  json_type=json_type)


def _per_user(name: str, group: Group, help_text: str) -> Metric:
    """A ``Scope.GPU_SUMMARY`` gauge per GPU and user, summed from the GPU's process list."""
    return Metric(name, Kind.GAUGE, group, help_text, labels=(*GPU_LABELS, "user"),
                  scope=Scope.GPU_SUMMARY)


PROCESSES = Metric(
    "gpu_processes", Kind.GAUGE, Group.PROCESSES,
    "Number of processes holding a context on the GPU (0 when idle).",
    scope=Scope.GPU_SUMMARY,
)
PROCESS_MEMORY = _per_process(
    "gpu_process_memory_used_bytes", Group.PROCESSES,
    "GPU memory the driver handed to this process, in bytes: CUDA context (a few hundred MiB) "
    "plus the framework's caching-allocator reserve plus tensors. Larger than what PyTorch's "
    "memory_allocated() reports; close to memory_reserved() plus the context.",
    process_value=lambda process: process.used_memory_bytes, fold=Fold.SUM,
    json_field="used_memory_bytes", json_type=int,
)
PROCESS_UTILIZATION = _per_process(
    "gpu_process_utilization_ratio", Group.PROCESS_UTILIZATION,
    "Fraction of the last sample period in which this process's kernels ran on the GPU's SMs "
    "(0-1). 0 for a process with no sample since the previous collection.",
    process_value=lambda process: process.sm_utilization_ratio, fold=Fold.SUM_RATIO,
    json_field="sm_utilization_ratio",
)
PROCESS_START_TIME = _per_process(
    "gpu_process_start_time_seconds", Group.PROCESSES,
    "Start time of the process since the Unix epoch in seconds; time() minus this is its age.",
    process_value=lambda process: (process.owner.start_time_seconds
                                   if process.owner is not None else None),
    fold=Fold.OLDEST,
    json_field="start_time_seconds",
)
PROCESS_LAST_ACTIVE = _per_process(
    "gpu_process_last_active_timestamp_seconds", Group.PROCESS_UTILIZATION,
    "Unix time in seconds of the newest utilisation sample in which this process's kernels ran "
    "(SM utilisation above 0); time() minus this is how long it has been idle. Absent while no "
    "such sample was seen: after an exporter restart only NVML's own sample buffer is known.",
    process_value=last_active_seconds,
    fold=Fold.NEWEST,
    json_field="last_active_seconds",
)
USER_MEMORY = _per_user(
    "gpu_user_memory_used_bytes", Group.PROCESSES,
    "GPU memory held by all of one user's processes on this GPU, in bytes (stable series for "
    "long-range views; 'unknown' where the owner could not be read).",
)
USER_PROCESSES = _per_user(
    "gpu_user_processes", Group.PROCESSES,
    "Number of one user's processes holding a context on this GPU.",
)

USER_IDLE_MEMORY = _per_user(
    "gpu_user_idle_memory_bytes", Group.PROCESS_UTILIZATION,
    "GPU memory held by one user's idle processes on this GPU, in bytes: processes holding more "
    "than 1 GiB whose kernels ran less than 5 % of the last sample period (0 when none). "
    "Summed here so that alerts and fleet views need not read every process series.",
)
USER_UTILIZATION_MAX = _per_user(
    "gpu_user_process_utilization_max_ratio", Group.PROCESS_UTILIZATION,
    "Utilisation of one user's busiest process on this GPU: the largest fraction of the last "
    "sample period in which one of their processes' kernels ran (0-1).",
)
