"""Per-process PyTorch caching-allocator rows (group ``torch``, opt-in: ``--collector.torch``).

The figures come from the processes themselves: ``gpu_exporter_torch`` publishes
``torch.cuda.memory_stats()`` into a shared directory and ``exporter.attribution.torchstats``
joins each file to its process (checking pid, start time and owner uid) and stores the figures
in ``GpuProcess.values`` under the row's name. Processes without the publisher have none of
these series. The derived driver overhead is NVML's per-process memory minus ``reserved``.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    PROCESS_LABELS,
    Fold,
    Group,
    Kind,
    Metric,
    ProcessView,
    Scope,
    Since,
)


def _row(name: str, kind: Kind, help_text: str, json_field: str) -> Metric:
    return Metric(
        name, kind, Group.TORCH, help_text, labels=PROCESS_LABELS, scope=Scope.PROCESS,
        process_value=lambda process: process.values.get(name), fold=Fold.SUM,
        json_field=json_field, json_type=int,
        since=Since.PROCESS if kind is Kind.COUNTER else None,
    )


TORCH_ALLOCATED = _row(
    "gpu_process_torch_allocated_bytes", Kind.GAUGE,
    "Bytes in live PyTorch tensors of this process on this GPU "
    "(torch.cuda.memory_allocated(); published by the process, see gpu_exporter_torch).",
    "torch_allocated_bytes",
)
TORCH_RESERVED = _row(
    "gpu_process_torch_reserved_bytes", Kind.GAUGE,
    "Bytes PyTorch's caching allocator holds from the driver: live tensors plus its cache "
    "(torch.cuda.memory_reserved()). Reserved minus allocated is cache other processes cannot use.",
    "torch_reserved_bytes",
)
TORCH_ACTIVE = _row(
    "gpu_process_torch_active_bytes", Kind.GAUGE,
    "Bytes in active allocator blocks: allocated plus freed blocks still awaiting use on "
    "another CUDA stream (memory_stats active_bytes.all.current).",
    "torch_active_bytes",
)
TORCH_INACTIVE_SPLIT = _row(
    "gpu_process_torch_inactive_split_bytes", Kind.GAUGE,
    "Bytes in cached blocks split off larger segments that cannot be returned to the driver "
    "(memory_stats inactive_split_bytes.all.current): fragmentation.",
    "torch_inactive_split_bytes",
)
TORCH_PEAK_ALLOCATED = _row(
    "gpu_process_torch_peak_allocated_bytes", Kind.GAUGE,
    "Most bytes ever in live tensors of this process on this GPU since it started or reset "
    "its peak statistics (torch.cuda.max_memory_allocated()).",
    "torch_peak_allocated_bytes",
)
TORCH_ALLOC_RETRIES = _row(
    "gpu_process_torch_alloc_retries_total", Kind.COUNTER,
    "Times a cudaMalloc failed and PyTorch freed its cache and retried (memory_stats "
    "num_alloc_retries). Rising without OOMs: memory pressure or fragmentation, and slow steps.",
    "torch_alloc_retries",
)
TORCH_OOMS = _row(
    "gpu_process_torch_ooms_total", Kind.COUNTER,
    "Out-of-memory errors PyTorch raised in this process on this GPU, caught by the program "
    "or not (memory_stats num_ooms).",
    "torch_ooms",
)


def _driver_overhead(process: ProcessView) -> float | None:
    reserved = process.values.get(TORCH_RESERVED.name)
    if reserved is None or process.used_memory_bytes is None:
        return None
    overhead = process.used_memory_bytes - reserved
    # Negative: the two were sampled at different moments (the publisher writes every few
    # seconds); better no number than a wrong one.
    return float(overhead) if overhead >= 0 else None


TORCH_DRIVER_OVERHEAD = Metric(
    "gpu_process_torch_driver_overhead_bytes", Kind.GAUGE, Group.TORCH,
    "GPU memory of this process outside PyTorch's allocator: NVML's per-process memory minus "
    "torch reserved, i.e. the CUDA context, kernels and library workspaces (cuBLAS, NCCL). "
    "Left out when negative (the two are sampled at different moments).",
    labels=PROCESS_LABELS, scope=Scope.PROCESS, process_value=_driver_overhead, fold=Fold.SUM,
    json_field="torch_driver_overhead_bytes", json_type=int,
)



def _user_counter(name: str, what: str) -> Metric:
    return Metric(
        name, Kind.COUNTER, Group.TORCH,
        f"{what} in this user's processes on this GPU since the exporter started, processes "
        "that have exited included (processes already running then count from that moment). "
        "Summed here so that alerts need not read every process's series.",
        labels=(*GPU_LABELS, "user"), scope=Scope.GPU_SUMMARY, since=Since.EXPORTER,
    )


USER_TORCH_OOMS = _user_counter("gpu_user_torch_ooms_total",
                                "PyTorch out-of-memory errors (caught or not)")
USER_TORCH_ALLOC_RETRIES = _user_counter(
    "gpu_user_torch_alloc_retries_total",
    "Times a cudaMalloc failed and PyTorch freed its cache and retried",
)
#: Per-user counter -> the per-process counter it accumulates
#: (``exporter.attribution.torchtotals`` keeps the sums).
USER_COUNTERS: dict[Metric, Metric] = {
    USER_TORCH_OOMS: TORCH_OOMS,
    USER_TORCH_ALLOC_RETRIES: TORCH_ALLOC_RETRIES,
}

#: The rows the join fills (name -> published field of gpu_exporter_torch's file).
PUBLISHED_FIELDS: dict[str, str] = {
    TORCH_ALLOCATED.name: "allocated_bytes",
    TORCH_RESERVED.name: "reserved_bytes",
    TORCH_ACTIVE.name: "active_bytes",
    TORCH_INACTIVE_SPLIT.name: "inactive_split_bytes",
    TORCH_PEAK_ALLOCATED.name: "peak_allocated_bytes",
    TORCH_ALLOC_RETRIES.name: "alloc_retries",
    TORCH_OOMS.name: "ooms",
}
TORCH_ROWS: tuple[Metric, ...] = (
    TORCH_ALLOCATED, TORCH_RESERVED, TORCH_ACTIVE, TORCH_INACTIVE_SPLIT, TORCH_PEAK_ALLOCATED,
    TORCH_ALLOC_RETRIES, TORCH_OOMS, TORCH_DRIVER_OVERHEAD, USER_TORCH_OOMS,
    USER_TORCH_ALLOC_RETRIES,
)
