"""The one catalogue of every metric gpu-exporter exposes: one row (``Metric``) per metric.

Rows live in ``gpu`` (per GPU), ``activity`` (per GPU and MIG instance, from GPM),
``process`` (per process and per user), ``allocator`` (per
process, PyTorch's allocator as the process publishes it), ``accounting`` (per user on the
host, the idle-accounting counters) and ``self_metrics`` (the exporter
itself); ``core`` says what a row holds. The NVML read, the simulated value,
the families, the JSON model, the README table and the dashboards' names all follow from the
rows. ``CATALOGUE`` is every row in documentation order; ``GPU_ROWS`` and ``PROCESS_ROWS``
are the rows the generic code paths walk.
``markdown_table`` is the README's metric table (written by ``python -m dashboards.generate``).
"""

from __future__ import annotations

from exporter.metrics import (
    accounting,
    activity,
    allocator,
    attribution,
    gpu,
    health,
    process,
    self_metrics,
)
from exporter.metrics.activity import (
    DRAM_ACTIVE,
    GPM_STATUS,
    GRAPHICS_ACTIVE,
    MIG_SM_ACTIVE,
    NVLINK_TRAFFIC,
    PCIE_TRAFFIC,
    PIPE_ACTIVE,
    SM_ACTIVE,
    SM_OCCUPANCY,
    TENSOR_ACTIVE,
    TENSOR_PIPE_ACTIVE,
)
from exporter.metrics.attribution import (
    ALLOCATION_INFO,
    ALLOCATION_LABELS,
    POD_RESOURCES_STATUS,
    POD_RESOURCES_UP,
    WORKLOAD_MEMORY,
    WORKLOAD_UTILIZATION,
)
from exporter.metrics.core import (
    GPU_LABELS,
    OPT_IN_GROUPS,
    OVERFLOW_VALUE,
    PREFIX,
    PROCESS_LABELS,
    SELF_PREFIX,
    SWITCHABLE_GROUPS,
    UNITS,
    UNKNOWN_VALUE,
    Constant,
    Fold,
    GpmField,
    Group,
    Kind,
    Metric,
    NvmlGpm,
    NvmlRead,
    NvmlSpecial,
    Scope,
    default_groups,
    nvml,
)
from exporter.metrics.gpu import (
    ECC_ERRORS,
    ENERGY,
    FAN_SPEED,
    GPU_INFO,
    GPU_UP,
    GRAPHICS_CLOCK,
    MEMORY_CLOCK,
    MEMORY_FREE,
    MEMORY_RESERVED,
    MEMORY_TOTAL,
    MEMORY_USED,
    MEMORY_UTILIZATION,
    PCIE_THROUGHPUT,
    PERFORMANCE_STATE,
    POWER_LIMIT,
    POWER_THROTTLE_REASONS,
    POWER_USAGE,
    SM_CLOCK,
    TEMPERATURE,
    THERMAL_THROTTLE_REASONS,
    THROTTLE_ACTIVE,
    THROTTLE_REASONS,
    UTILIZATION,
)
from exporter.metrics.health import (
    ECC_AGGREGATE,
    HEALTH_EVENT_COUNT,
    HEALTH_EVENTS,
    LAST_XID,
    MIG_ENABLED,
    MIG_INFO,
    MIG_MEMORY_TOTAL,
    MIG_MEMORY_USED,
    MIG_PROCESSES,
    MIG_USER_MEMORY,
    MIG_XID_ERRORS,
    REMAP_FAILURE,
    REMAP_PENDING,
    REMAPPED_ROWS,
    RETIRED_PAGES,
    RETIRED_PENDING,
    XID_ERRORS,
    XID_EVENTS_REGISTERED,
)
from exporter.metrics.process import (
    PROCESS_LAST_ACTIVE,
    PROCESS_MEMORY,
    PROCESS_START_TIME,
    PROCESS_UTILIZATION,
    PROCESSES,
    USER_IDLE_MEMORY,
    USER_MEMORY,
    USER_PROCESSES,
    USER_UTILIZATION_MAX,
)
from exporter.metrics.self_metrics import (
    BUILD_INFO,
    COLLECTION_DURATION,
    COLLECTION_SUCCESS,
    DATA_AGE,
    ERRORS,
    LAST_SUCCESS,
    PROCESS_SERIES_OVERFLOW,
    SOURCE_UP,
)
from exporter.snapshot import GpuReading, Value

#: The modules holding rows, in documentation order (a new row module is added here).
_ROW_MODULES = (gpu, health, activity, process, allocator, attribution, accounting, self_metrics)

#: Every row, in documentation order (per GPU, per process, the exporter itself).
CATALOGUE: tuple[Metric, ...] = tuple(
    row for module in _ROW_MODULES for row in vars(module).values() if isinstance(row, Metric)
)
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in CATALOGUE}
#: Rows whose values the sources store in ``GpuReading.values`` (exposition order).
GPU_ROWS: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.scope is Scope.GPU)
#: One series per process (exposition order within each group).
PROCESS_ROWS: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.scope is Scope.PROCESS)
#: Per-GPU rows read from GPM (the status row included).
GPM_ROWS: tuple[Metric, ...] = tuple(m for m in GPU_ROWS if isinstance(m.nvml, NvmlGpm))
#: Per user (pod, Slurm job) on the host: the idle-accounting counters.
ACCOUNTING_ROWS: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.scope is Scope.ACCOUNTING)


def gpu_activity(reading: GpuReading) -> float | None:
    """How busy the GPU really was: SM activity where GPM reports it, else utilisation (None:
    neither was read). The alerts' recorded activity is the same choice, in PromQL."""
    found = reading.value(SM_ACTIVE.name)
    return reading.value(UTILIZATION.name) if found is None else found


def markdown_table() -> str:
    """The README's metric table, one row per metric."""
    lines = ["| metric | type | labels | group | meaning |", "|---|---|---|---|---|"]
    for metric in CATALOGUE:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
        group = metric.group.value + (" (opt-in)" if metric.group in OPT_IN_GROUPS else "")
        lines.append(
            f"| `{metric.name}` | {metric.kind.value} | {labels} | {group} | {metric.help} |"
        )
    return "\n".join(lines)


__all__ = [
    "ACCOUNTING_ROWS",
    "ALLOCATION_INFO",
    "ALLOCATION_LABELS",
    "BUILD_INFO",
    "BY_NAME",
    "CATALOGUE",
    "COLLECTION_DURATION",
    "COLLECTION_SUCCESS",
    "DATA_AGE",
    "DRAM_ACTIVE",
    "ECC_AGGREGATE",
    "ECC_ERRORS",
    "ENERGY",
    "ERRORS",
    "FAN_SPEED",
    "GPM_ROWS",
    "GPM_STATUS",
    "GPU_INFO",
    "GPU_LABELS",
    "GPU_ROWS",
    "GPU_UP",
    "GRAPHICS_ACTIVE",
    "GRAPHICS_CLOCK",
    "HEALTH_EVENTS",
    "HEALTH_EVENT_COUNT",
    "LAST_SUCCESS",
    "LAST_XID",
    "MEMORY_CLOCK",
    "MEMORY_FREE",
    "MEMORY_RESERVED",
    "MEMORY_TOTAL",
    "MEMORY_USED",
    "MEMORY_UTILIZATION",
    "MIG_ENABLED",
    "MIG_INFO",
    "MIG_MEMORY_TOTAL",
    "MIG_MEMORY_USED",
    "MIG_PROCESSES",
    "MIG_SM_ACTIVE",
    "MIG_USER_MEMORY",
    "MIG_XID_ERRORS",
    "NVLINK_TRAFFIC",
    "OPT_IN_GROUPS",
    "OVERFLOW_VALUE",
    "PCIE_THROUGHPUT",
    "PCIE_TRAFFIC",
    "PERFORMANCE_STATE",
    "PIPE_ACTIVE",
    "POD_RESOURCES_STATUS",
    "POD_RESOURCES_UP",
    "POWER_LIMIT",
    "POWER_THROTTLE_REASONS",
    "POWER_USAGE",
    "PREFIX",
    "PROCESSES",
    "PROCESS_LABELS",
    "PROCESS_LAST_ACTIVE",
    "PROCESS_MEMORY",
    "PROCESS_ROWS",
    "PROCESS_SERIES_OVERFLOW",
    "PROCESS_START_TIME",
    "PROCESS_UTILIZATION",
    "REMAPPED_ROWS",
    "REMAP_FAILURE",
    "REMAP_PENDING",
    "RETIRED_PAGES",
    "RETIRED_PENDING",
    "SELF_PREFIX",
    "SM_ACTIVE",
    "SM_CLOCK",
    "SM_OCCUPANCY",
    "SOURCE_UP",
    "SWITCHABLE_GROUPS",
    "TEMPERATURE",
    "TENSOR_ACTIVE",
    "TENSOR_PIPE_ACTIVE",
    "THERMAL_THROTTLE_REASONS",
    "THROTTLE_ACTIVE",
    "THROTTLE_REASONS",
    "UNITS",
    "UNKNOWN_VALUE",
    "USER_IDLE_MEMORY",
    "USER_MEMORY",
    "USER_PROCESSES",
    "USER_UTILIZATION_MAX",
    "UTILIZATION",
    "WORKLOAD_MEMORY",
    "WORKLOAD_UTILIZATION",
    "XID_ERRORS",
    "XID_EVENTS_REGISTERED",
    "Constant",
    "Fold",
    "GpmField",
    "Group",
    "Kind",
    "Metric",
    "NvmlGpm",
    "NvmlRead",
    "NvmlSpecial",
    "Scope",
    "Value",
    "default_groups",
    "gpu_activity",
    "markdown_table",
    "nvml",
]
