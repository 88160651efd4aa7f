"""Per-process and per-user metric rows (group ``processes`` / ``process_utilization``).

A ``Scope.PROCESS`` row is one series per process: ``process_value`` reads it from a
``GpuProcess`` and ``fold`` says how processes sharing a series (no ``pid`` label, the overflow
series) combine. ``Scope.GPU_SUMMARY`` rows are counted or summed from a GPU's process list in
``exporter.exposition.processes``.
"""

from __future__ import annotations

from exporter.metrics.core import GPU_LABELS, PROCESS_LABELS, Fold, Group, Kind, Metric, Scope
from exporter.snapshot import GpuProcess

#: ``GpuProcess.values`` key of the last-active time (filled by the sources).
LAST_ACTIVE = "gpu_process_last_active_timestamp_seconds"


def last_active_seconds(process: GpuProcess) -> float | None:
    """The process's last-active time, unless it predates the process (a sample of an earlier
    process with the same pid, still in NVML's buffer after an exporter restart)."""
    value = process.values.get(LAST_ACTIVE)
    owner = process.owner
    if value is None or (owner is not None and value < owner.start_time_seconds - 1.0):
        return None
    return value


PROCESSES = Metric(
    "gpu_processes", Kind.GAUGE, Group.PROCESSES,
    "Number of processes holding a context on the GPU (0 when idle).",
    scope=Scope.GPU_SUMMARY,
)
PROCESS_MEMORY = Metric(
    "gpu_process_memory_used_bytes", Kind.GAUGE, Group.PROCESSES,
    "GPU memory the driver handed to this process, in bytes: CUDA context (a few hundred MiB) "
    "plus the framework's caching-allocator reserve plus tensors. Larger than what PyTorch's "
    "memory_allocated() reports; close to memory_reserved() plus the context.",
    labels=PROCESS_LABELS, scope=Scope.PROCESS,
    process_value=lambda process: process.used_memory_bytes, fold=Fold.SUM,
    json_field="used_memory_bytes", json_type=int,
)
PROCESS_UTILIZATION = Metric(
    "gpu_process_utilization_ratio", Kind.GAUGE, Group.PROCESS_UTILIZATION,
    "Fraction of the last sample period in which this process's kernels ran on the GPU's SMs "
    "(0-1). 0 for a process with no sample since the previous collection.",
    labels=PROCESS_LABELS, scope=Scope.PROCESS,
    process_value=lambda process: process.sm_utilization_ratio, fold=Fold.SUM_RATIO,
    json_field="sm_utilization_ratio",
)
PROCESS_START_TIME = Metric(
    "gpu_process_start_time_seconds", Kind.GAUGE, Group.PROCESSES,
    "Start time of the process since the Unix epoch in seconds; time() minus this is its age.",
    labels=PROCESS_LABELS, scope=Scope.PROCESS,
    process_value=lambda process: (process.owner.start_time_seconds
                                   if process.owner is not None else None),
    fold=Fold.OLDEST,
    json_field="start_time_seconds",
)
PROCESS_LAST_ACTIVE = Metric(
    "gpu_process_last_active_timestamp_seconds", Kind.GAUGE, Group.PROCESS_UTILIZATION,
    "Unix time in seconds of the newest utilisation sample in which this process's kernels ran "
    "(SM utilisation above 0); time() minus this is how long it has been idle. Absent while no "
    "such sample was seen: after an exporter restart only NVML's own sample buffer is known.",
    labels=PROCESS_LABELS, scope=Scope.PROCESS,
    process_value=last_active_seconds,
    fold=Fold.NEWEST,
    json_field="last_active_seconds",
)
USER_MEMORY = Metric(
    "gpu_user_memory_used_bytes", Kind.GAUGE, Group.PROCESSES,
    "GPU memory held by all of one user's processes on this GPU, in bytes (stable series for "
    "long-range views; 'unknown' where the owner could not be read).",
    labels=(*GPU_LABELS, "user"), scope=Scope.GPU_SUMMARY,
)
USER_PROCESSES = Metric(
    "gpu_user_processes", Kind.GAUGE, Group.PROCESSES,
    "Number of one user's processes holding a context on this GPU.",
    labels=(*GPU_LABELS, "user"), scope=Scope.GPU_SUMMARY,
)

USER_IDLE_MEMORY = Metric(
    "gpu_user_idle_memory_bytes", Kind.GAUGE, Group.PROCESS_UTILIZATION,
    "GPU memory held by one user's idle processes on this GPU, in bytes: processes holding more "
    "than 1 GiB whose kernels ran less than 5 % of the last sample period (0 when none). "
    "Summed here so that alerts and fleet views need not read every process series.",
    labels=(*GPU_LABELS, "user"), scope=Scope.GPU_SUMMARY,
)
USER_UTILIZATION_MAX = Metric(
    "gpu_user_process_utilization_max_ratio", Kind.GAUGE, Group.PROCESS_UTILIZATION,
    "Utilisation of one user's busiest process on this GPU: the largest fraction of the last "
    "sample period in which one of their processes' kernels ran (0-1).",
    labels=(*GPU_LABELS, "user"), scope=Scope.GPU_SUMMARY,
)
