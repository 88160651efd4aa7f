"""Idle-accounting counter rows: GPU time and memory each user (pod, Slurm job) held, idled
and used on this host, integrated by the exporter at every collection.

The exporter sees every process at every collection, so it integrates here what recording
rules would otherwise have to recompute from every process series each minute
(``exporter.attribution.accounting`` has the definitions). One series per user on the host
(and per pod and Slurm job where ``--kubernetes`` / ``--slurm`` add those labels): the rules
of ``dashboards/accounting.py`` take their ``rate()``, at a cost proportional to users, not
processes. Counters start at 0 when the exporter starts.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import Group, Kind, Metric, Scope, Since
from exporter.catalogue.workloads import KINDS, group_by_names

#: Labels of the accounting counters: ``user``, then the ``group_by`` labels of every workload
#: kind (``namespace``/``pod`` with --kubernetes, ``slurm_job`` with --slurm; the exposition
#: drops those switched off).
_LABELS = ("user", *group_by_names(KINDS))


def _counter(name: str, group: Group, help_text: str) -> Metric:
    # Dashboards chart them through the accounting records, not by name.
    return Metric(name, Kind.COUNTER, group, help_text + " Since the exporter started; "
                  "its rate() is the quantity held per second.",
                  labels=_LABELS, scope=Scope.ACCOUNTING, charted=False, since=Since.SERIES)


HELD_MEMORY_SECONDS = _counter(
    "gpu_accounting_held_memory_byte_seconds_total", Group.PROCESSES,
    "GPU memory held by one user's processes on this host (one pod's, one Slurm job's), "
    "integrated over time, in byte-seconds.",
)
HELD_GPU_SECONDS = _counter(
    "gpu_accounting_held_gpu_seconds_total", Group.PROCESSES,
    "GPU time held by one user's processes on this host, in GPU-seconds: each GPU is shared "
    "among its processes in proportion to the memory they hold; a GPU Slurm gave a job that "
    "runs nothing on it is the job's.",
)
IDLE_MEMORY_SECONDS = _counter(
    "gpu_accounting_idle_memory_byte_seconds_total", Group.PROCESS_UTILIZATION,
    "GPU memory held by one user's idle processes on this host (SM utilisation under the "
    "idle threshold, 5 %), integrated over time, in byte-seconds.",
)
IDLE_GPU_SECONDS = _counter(
    "gpu_accounting_idle_gpu_seconds_total", Group.PROCESS_UTILIZATION,
    "GPU time held by one user's idle processes while the GPU itself idled (SM activity where "
    "the GPU reports it, else utilisation, under 5 %), in GPU-seconds (memory shares, as for "
    "the time held; a job's allocated GPU with no process on it counts whole).",
)
USED_GPU_SECONDS = _counter(
    "gpu_accounting_used_gpu_seconds_total", Group.PROCESS_UTILIZATION,
    "GPU time in which one user's processes' kernels ran on the SMs, in GPU-seconds (the "
    "processes' SM utilisation integrated over time).",
)
ATTRIBUTED_ENERGY = _counter(
    "gpu_accounting_energy_joules_total", Group.PROCESS_UTILIZATION,
    "Energy of the GPUs attributed to one user's processes on this host, in joules: each "
    "GPU's power split by the processes' shares of its SM utilisation (of its memory when no "
    "kernel ran). Absent without power readings.",
)
