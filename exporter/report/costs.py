"""What one workload's GPU time cost, from the cost records: for a per-job (or per-pod)
summary.

``workload_cost`` asks Prometheus for one Slurm job's or pod's held, used, idle and energy cost
over its time (the records of ``dashboards/cost.py``, at the job or namespace/pod level), in one
query. Without prices there are no cost records and it returns None: a summary then shows no
cost, never a zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.catalogue import records
from exporter.report.client import PrometheusClient
from exporter.report.timerange import TimeRange

__all__ = ["WorkloadCost", "workload_cost"]

_TAG = "__cost"


@dataclass(frozen=True, slots=True)
class WorkloadCost:
    """Amounts in ``currency`` (None: that part is not priced)."""

    currency: str
    held: float | None = None
    used: float | None = None
    idle: float | None = None
    energy: float | None = None

    @property
    def total(self) -> float:
        """Held GPU time and energy together (used and idle are parts of held)."""
        return (self.held or 0.0) + (self.energy or 0.0)


def cost_query(level: records.Level, matchers: str, span: TimeRange) -> str:
    """Every cost of the workload ``matchers`` selects at ``level``, summed over ``span``
    (one sample per cost and currency, tagged with its record's quantity)."""
    window = f"[{max(round(span.seconds), 1)}s]"
    parts = [f'label_replace(sum by ({records.CURRENCY_LABEL}) (sum_over_time('
             f'{records.selector(level.record(q), matchers)}{window})), "{_TAG}", "{q}", "", "")'
             for q in records.COST_QUANTITIES]
    return "\nor ".join(parts)


def workload_cost(client: PrometheusClient, level: records.Level, matchers: str,
                  span: TimeRange, interval_seconds: float = records.INTERVAL_SECONDS
                  ) -> WorkloadCost | None:
    """What the workload ``matchers`` selects at ``level`` (``records.JOB`` with
    ``slurm_job="913377"``, ``records.POD`` with ``namespace="ml", pod="nb-0"``) cost over
    ``span``; None without cost records (no prices), or with several currencies.

    Raises:
        ReportError: Prometheus unreachable or erroring.
    """
    amounts: dict[str, float] = {}
    currencies = set()
    for sample in client.query(cost_query(level, matchers, span), span.end):
        quantity = sample.labels.get(_TAG, "")
        if quantity not in records.COST_QUANTITIES or not math.isfinite(sample.value):
            continue
        currencies.add(sample.labels.get(records.CURRENCY_LABEL, ""))
        amounts[quantity] = amounts.get(quantity, 0.0) + sample.value * interval_seconds
    if len(currencies) != 1:
        return None
    return WorkloadCost(currencies.pop(), amounts.get(records.HELD_COST),
                        amounts.get(records.USED_COST), amounts.get(records.IDLE_COST),
                        amounts.get(records.ENERGY_COST))
