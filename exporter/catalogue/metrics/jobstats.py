"""Rows served under the names Jobstats' tools query (opt-in group ``jobstats``).

Princeton's Jobstats (``jobstats``, gpudash, Job Defense Shield) reads the series of the
plazonic nvidia_gpu_prometheus_exporter: per GPU (and MIG device) ``nvidia_gpu_*`` with the
labels ``ordinal`` (NVML index), ``minor_number`` (``/dev/nvidia<N>``), ``uuid``, ``name``,
``GPU_I_ID`` (a MIG device's GPU instance) and, where a Slurm job holds the device,
``jobid`` and ``userid``; ``nvidia_gpu_jobId`` and ``nvidia_gpu_jobUid`` carry the job id and
its owner's uid as values. Its queries join on every label
(``nvidia_gpu_duty_cycle{cluster="C"} and nvidia_gpu_jobId == 123``), so every row here has
the same labels. Each row serves a native row's value in the peer's unit (``Alias``); the
names break this project's conventions on purpose (percent, milliwatts, camel case): they are
the peer's. docs/slurm.md has the drop-in recipe.
"""

from __future__ import annotations

import exporter.catalogue.metrics.gpu as _gpu  # by module: its rows are not rows of this one
from exporter.catalogue.metrics.core import Alias, Group, Kind, Metric, Scope

#: The peer's name prefix (``nvidia_gpu_``) and its labels, in its order.
JOBSTATS_PREFIX = "nvidia_gpu_"
JOBSTATS_LABELS: tuple[str, ...] = ("ordinal", "minor_number", "uuid", "name", "GPU_I_ID",
                                    "jobid", "userid")


def _row(name: str, help_text: str, alias: Alias) -> Metric:
    return Metric(JOBSTATS_PREFIX + name, Kind.GAUGE, Group.JOBSTATS,
                  help_text + " (Jobstats compatibility: labels as the plazonic exporter's.)",
                  labels=JOBSTATS_LABELS, scope=Scope.JOBSTATS, alias=alias, charted=False)


JOBSTATS_DUTY_CYCLE = _row(
    "duty_cycle", "Percent (0-100) of the last sample period in which a kernel ran on the GPU: "
    "gpu_utilization_ratio x 100. Not served for MIG devices.",
    Alias(_gpu.UTILIZATION.name, 100.0))
JOBSTATS_MEMORY_USED = _row(
    "memory_used_bytes", "Device memory used on the GPU (or MIG device), in bytes.",
    Alias(_gpu.MEMORY_USED.name))
JOBSTATS_MEMORY_TOTAL = _row(
    "memory_total_bytes", "Device memory of the GPU (or MIG device), in bytes.",
    Alias(_gpu.MEMORY_TOTAL.name))
JOBSTATS_POWER = _row(
    "power_usage_milliwatts", "Board power draw in milliwatts (a MIG device reports its "
    "parent GPU's).", Alias(_gpu.POWER_USAGE.name, 1000.0))
JOBSTATS_TEMPERATURE = _row(
    "temperature_celsius", "GPU core temperature in degrees Celsius (a MIG device reports its "
    "parent GPU's).", Alias(_gpu.TEMPERATURE.name))
JOBSTATS_JOB_ID = _row(
    "jobId", "The id of the Slurm job holding the GPU (or MIG device), from the prolog's "
    "allocation file; absent while no job holds it.", Alias(None, allocation="job_id"))
JOBSTATS_JOB_UID = _row(
    "jobUid", "The uid of the owner of the Slurm job holding the GPU (or MIG device); absent "
    "while no job holds it or the file gives no uid.", Alias(None, allocation="uid"))
