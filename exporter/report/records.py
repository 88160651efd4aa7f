"""The idle-accounting recording rules' names: shared by the rule generator and the report.

The rules (``dashboards/accounting.py``) run in one group every ``INTERVAL_SECONDS``. Each
recorded sample is a rate held over the last interval (bytes, GPUs, watts), so a range's total is
``sum_over_time(record[range]) * INTERVAL_SECONDS`` (byte-seconds, GPU-seconds, joules): one
cheap query per record, whatever the number of raw samples behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: How often the accounting group runs; every total multiplies by it.
INTERVAL: Final = "1m"
INTERVAL_SECONDS: Final = 60
GROUP: Final = "gpu-exporter-accounting"
RULE_FILE: Final = "gpu-exporter-accounting.yaml"

#: The batch-job label on process series (Slurm job id; none until an enricher adds it).
JOB_LABEL: Final = "slurm_job"  # the exporter's --slurm label (metrics.core.SLURM_LABELS)


@dataclass(frozen=True, slots=True)
class Level:
    """An aggregation level: the labels it keeps, and the level part of its record names."""

    name: str  # "instance_user"
    keeps: tuple[str, ...]  # the labels (besides target labels) that identify a row

    def record(self, quantity: str) -> str:
        """The record name of ``quantity`` (e.g. "idle_gpus") at this level."""
        return f"{self.name}:gpu_{quantity}:sum1m"


USER: Final = Level("instance_user", ("user",))
POD: Final = Level("instance_namespace_pod", ("namespace", "pod"))
JOB: Final = Level("instance_job", (JOB_LABEL, "user"))
LEVELS: Final = (USER, POD, JOB)

#: Per process, recorded only while idle: the bytes it holds, and its share of an idle GPU.
PROCESS_IDLE_MEMORY: Final = "process:gpu_idle_memory_bytes:1m"
PROCESS_IDLE_GPUS: Final = "process:gpu_idle_gpus:1m"
#: Per user and GPU: the user's processes' SM utilisation (feeds used GPUs and power shares).
GPU_USER_USED: Final = "instance_gpu_user:gpu_used_gpus:sum1m"

#: Quantities recorded at every level (unit of the sample, unit of its range total).
IDLE_MEMORY = "idle_memory_bytes"  # bytes held by idle processes -> byte-seconds
IDLE_GPUS = "idle_gpus"  # share of GPUs held while the GPU was idle -> GPU-seconds
HELD_MEMORY = "held_memory_bytes"  # bytes held at all -> byte-seconds
HELD_GPUS = "held_gpus"  # share of GPUs held (by memory share) -> GPU-seconds
USED_GPUS = "used_gpus"  # SM-busy share of GPUs (process utilisation) -> GPU-seconds
POWER = "power_watts"  # attributed power -> joules (per user only)
QUANTITIES: Final = (IDLE_GPUS, IDLE_MEMORY, HELD_GPUS, HELD_MEMORY, USED_GPUS)


def level_quantities(level: Level) -> tuple[str, ...]:
    """What is recorded at ``level`` (energy is attributed per user only)."""
    return (*QUANTITIES, POWER) if level is USER else QUANTITIES


def all_records() -> tuple[str, ...]:
    """Every record name, in rule-file order."""
    return (PROCESS_IDLE_MEMORY, PROCESS_IDLE_GPUS, GPU_USER_USED,
            *(lv.record(q) for lv in LEVELS for q in level_quantities(lv)))
