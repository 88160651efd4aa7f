"""Idle accounting: recording rules for GPU time and memory held while idle.

The exporter integrates, at every collection, what each user (pod, Slurm job) on its host held,
idled and used into counters (``exporter.attribution.accounting`` has the definitions: idle
under ``thresholds.IDLE_UTILIZATION_RATIO``, GPUs shared by memory, power split by SM share).
One group runs every ``records.INTERVAL`` (1m) and records each counter's rate per user, per
namespace/pod (rows with a pod) and per batch job (rows with ``records.JOB_LABEL``); target
labels (instance, node, ...) are kept. Each sample is a rate, so a range total only has to
sum (``sum_over_time(r[7d]) * 60``): the report and the efficiency dashboard never touch raw
samples over long ranges.

The group reads a few series per host (one per user, pod or job), never a process series, so
its cost grows with users, not processes. Forgotten processes are found from the exporter's
per-process last-active times where they are shown (the node dashboard, the report), not
recorded here.
"""

from __future__ import annotations

from dashboards.rules import RecordingRule, RuleGroup
from exporter.catalogue import metrics, records
from exporter.catalogue.metrics import accounting as counters
from exporter.catalogue.workloads import KINDS, group_by_names

#: The counter each recorded quantity is the rate of.
COUNTERS: dict[str, metrics.Metric] = {
    records.IDLE_GPUS: counters.IDLE_GPU_SECONDS,
    records.IDLE_MEMORY: counters.IDLE_MEMORY_SECONDS,
    records.HELD_GPUS: counters.HELD_GPU_SECONDS,
    records.HELD_MEMORY: counters.HELD_MEMORY_SECONDS,
    records.USED_GPUS: counters.USED_GPU_SECONDS,
    records.POWER: counters.ATTRIBUTED_ENERGY,
}


def level_rate(level: records.Level, counter: metrics.Metric) -> str:
    """``counter``'s rate summed at ``level`` (over the rows' other labels); pods and jobs
    keep only rows that have them."""
    labels = ("user", *group_by_names(KINDS))  # the counters' labels
    drop = ", ".join(x for x in labels if x not in level.keeps)
    only = ", ".join(f'{label}!=""' for label in level.keeps if label != "user")
    selected = counter.name + (f"{{{only}}}" if only else "")
    return f"sum without ({drop}) (rate({selected}[{records.RATE_WINDOW}]))"


def _rule(level: records.Level, quantity: str) -> RecordingRule:
    """``level``'s record of ``quantity``: the counter's rate at that level."""
    return RecordingRule(level.record(quantity), level_rate(level, COUNTERS[quantity]))


def groups() -> tuple[RuleGroup, ...]:
    """The accounting group."""
    rules = tuple(_rule(level, quantity) for level in records.LEVELS
                  for quantity in records.level_quantities(level))
    return (RuleGroup(records.GROUP, rules, interval=records.INTERVAL),)


def all_records() -> tuple[RecordingRule, ...]:
    """Every accounting recording rule."""
    return tuple(rule for g in groups() for rule in g.rules if isinstance(rule, RecordingRule))
