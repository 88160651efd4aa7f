"""The one catalogue of every metric gpu-exporter exposes: one row (``Metric``) per metric.

Rows live in ``gpu`` (per GPU), ``clock_events`` (time the clocks were held back, per
reason), ``health`` (memory repair, XID errors, MIG instances), ``nvlink`` (errors and state
per NVLink link), ``activity`` (per GPU and MIG instance, from GPM), ``process`` (per process
and per user), ``allocator`` (per process, PyTorch's allocator as the process publishes it),
``attribution`` (kubelet and Slurm allocations and DRA claims, per-workload sums),
``accounting`` (per user on the host, the idle-accounting counters), ``jobstats`` (the series
Jobstats' tools query, under their names) and ``self_metrics`` (the exporter itself); ``core``
says what a row holds. The NVML read, the simulated value, the families, the JSON model, the
docs' metric table and the dashboards' names all follow from the rows.

This package is the name index: every public name of the row modules is a name of the package
(``metrics.MEMORY_USED``, ``metrics.THROTTLE_REASONS``), with no list to keep by hand; a name
defined by two row modules is an error (a test checks). ``CATALOGUE`` is every row in
documentation order; ``GPU_ROWS``, ``PROCESS_ROWS``, ``GPM_ROWS`` and ``ACCOUNTING_ROWS`` are
the rows the generic code paths walk.
"""

from __future__ import annotations

from exporter.catalogue.metrics import (
    accounting,
    activity,
    allocator,
    attribution,
    clock_events,
    gpu,
    health,
    jobstats,
    nvlink,
    process,
    self_metrics,
)
from exporter.catalogue.metrics.accounting import *  # noqa: F403 (the name index)
from exporter.catalogue.metrics.activity import *  # noqa: F403
from exporter.catalogue.metrics.allocator import *  # noqa: F403
from exporter.catalogue.metrics.attribution import *  # noqa: F403
from exporter.catalogue.metrics.clock_events import *  # noqa: F403
from exporter.catalogue.metrics.core import *  # noqa: F403
from exporter.catalogue.metrics.core import Metric, NvmlGpm, Scope
from exporter.catalogue.metrics.gpu import *  # noqa: F403
from exporter.catalogue.metrics.health import *  # noqa: F403
from exporter.catalogue.metrics.jobstats import *  # noqa: F403
from exporter.catalogue.metrics.nvlink import *  # noqa: F403
from exporter.catalogue.metrics.process import *  # noqa: F403
from exporter.catalogue.metrics.self_metrics import *  # noqa: F403

#: The modules holding rows, in documentation order (a new row module is added here).
ROW_MODULES = (gpu, clock_events, health, nvlink, activity, process, allocator, attribution,
               accounting, jobstats, self_metrics)

#: Every row, in documentation order (per GPU, per process, the exporter itself).
CATALOGUE: tuple[Metric, ...] = tuple(
    row for module in ROW_MODULES for row in vars(module).values() if isinstance(row, Metric)
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
#: Per GPU and MIG device under the names Jobstats' tools query (group ``jobstats``).
JOBSTATS_ROWS: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.scope is Scope.JOBSTATS)
