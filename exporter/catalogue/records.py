"""The idle-accounting recording rules' names: shared by the rule generator and the report.

The rules (``dashboards/accounting.py``) run in one group every ``INTERVAL_SECONDS`` and take
the rate of the exporter's accounting counters (``exporter.catalogue.metrics.accounting``) over
``RATE_WINDOW``. Each recorded sample is a rate (bytes, GPUs, watts), so a range's total is
``sum_over_time(record[range]) * INTERVAL_SECONDS`` (byte-seconds, GPU-seconds, joules): one
cheap query per record, whatever the number of raw samples behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.catalogue import metrics
from exporter.catalogue.workloads import KUBERNETES, SLURM

#: How often the accounting group runs; every total multiplies by it.
INTERVAL: Final = "1m"
INTERVAL_SECONDS: Final = 60
#: The counters' rate window: two intervals, so that a 1-minute scrape still gives two samples
#: (summed every interval, overlapping windows count each minute twice at half weight).
RATE_WINDOW: Final = "2m"
GROUP: Final = "gpu-exporter-accounting"
RULE_FILE: Final = "gpu-exporter-accounting.yaml"

#: The batch-job label on process series (the Slurm job id, with the exporter's --slurm).
JOB_LABEL: Final = SLURM.group_by[0]


@dataclass(frozen=True, slots=True)
class Level:
    """An aggregation level: the labels it keeps, and the level part of its record names."""

    name: str  # "instance_user"
    keeps: tuple[str, ...]  # the labels (besides target labels) that identify a row

    def record(self, quantity: str) -> str:
        """The record name of ``quantity`` (e.g. "idle_gpus") at this level."""
        return f"{self.name}:gpu_{quantity}:sum1m"


USER: Final = Level("instance_user", ("user",))
POD: Final = Level("instance_namespace_pod", KUBERNETES.group_by)
JOB: Final = Level("instance_job", (JOB_LABEL, "user"))
LEVELS: Final = (USER, POD, JOB)

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
    return tuple(lv.record(q) for lv in LEVELS for q in level_quantities(lv))


def selector(name: str, matchers: str) -> str:
    """``name{matchers}`` (``name`` alone without matchers)."""
    return f"{name}{{{matchers}}}" if matchers else name


def idle_since(matchers: str) -> str:
    """Per process: when its kernels last ran, or its start if they never ran since the
    exporter saw it (only processes with utilisation samples: without them nothing says idle).

    Forgotten processes are ranked on this instead of a per-process record, which would cost
    a rule reading every process series each minute (docs/scale.md).
    """
    active, started, busy = (selector(row.name, matchers) for row in (
        metrics.PROCESS_LAST_ACTIVE, metrics.PROCESS_START_TIME, metrics.PROCESS_UTILIZATION))
    return f"({active} or ({started} and {busy}))"


# --- cost (dashboards/cost.py), only where a site set prices (exporter.catalogue.settings) ---
COST_GROUP: Final = "gpu-exporter-cost"
COST_RULE_FILE: Final = "gpu-exporter-cost.yaml"
#: Per scrape target: the price of one of its GPU-hours (the mean of its GPUs' prices by model),
#: with the prices' ``currency`` label, which every cost record carries too.
PRICE_RECORD: Final = "instance:gpu_price_per_gpu_hour:avg"
CURRENCY_LABEL: Final = "currency"
#: One static series per entry of the site's team mapping (value 1): ``{user, team}`` or
#: ``{namespace, team}``.
TEAM_INFO: Final = "gpu_team_info"
TEAM_LABEL: Final = "team"
#: The team of owners the mapping does not name.
UNASSIGNED_TEAM: Final = "unassigned"
#: Per team and host: the accounting quantities of the rows the mapping gives to the team
#: (a pod's namespace decides first, then the user).
TEAM: Final = Level("instance_team", (TEAM_LABEL,))
COST_LEVELS: Final = (*LEVELS, TEAM)
#: What the team records hold (all of it whenever a mapping is set).
TEAM_QUANTITIES: Final = (HELD_GPUS, USED_GPUS, IDLE_GPUS, POWER)
#: Cost quantities, each a cost per second in the currency (a range's total: sum_over_time
#: times INTERVAL_SECONDS, as for the other records): GPU time held, used and held idle at
#: the host's price per GPU-hour, and the attributed energy at the price per kWh.
HELD_COST = "held_cost_per_second"
USED_COST = "used_cost_per_second"
IDLE_COST = "idle_cost_per_second"
ENERGY_COST = "energy_cost_per_second"
#: The GPU-time record each GPU-time cost is priced from.
GPU_COSTS: Final = {HELD_COST: HELD_GPUS, USED_COST: USED_GPUS, IDLE_COST: IDLE_GPUS}
COST_QUANTITIES: Final = (HELD_COST, USED_COST, IDLE_COST, ENERGY_COST)


def report_quantities(level: Level) -> tuple[str, ...]:
    """What the report reads at ``level``: its accounting records, then its costs."""
    recorded = TEAM_QUANTITIES if level is TEAM else level_quantities(level)
    return (*recorded, *COST_QUANTITIES)
