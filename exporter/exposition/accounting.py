"""The idle-accounting counters: one series per row of ``Snapshot.accounting``.

Labels are ``user`` plus the ``group_by`` labels of the workload kinds switched on
(``namespace``/``pod`` with ``--kubernetes``, ``slurm_job`` with ``--slurm``); the enricher
(``exporter.attribution.accounting``) keeps rows apart by exactly those labels, so no two rows
share a series.
"""

from __future__ import annotations

from exporter.catalogue.metrics import ACCOUNTING_ROWS
from exporter.exposition.families import FamilyData, family
from exporter.snapshot import Snapshot
from exporter.state import ExpositionOptions

__all__ = ["accounting_families", "accounting_label_names"]


def accounting_label_names(options: ExpositionOptions) -> tuple[str, ...]:
    """Label names of the accounting counters under ``options``."""
    return ("user", *options.workload_labels.group_by)


def accounting_families(snapshot: Snapshot, options: ExpositionOptions) -> list[FamilyData]:
    """One family per accounting row whose group is on (families without samples left out)."""
    if not snapshot.accounting:
        return []
    names = accounting_label_names(options)
    group_by = names[1:]
    keys = [(row.user, *(row.workload.get(name, "") for name in group_by))
            for row in snapshot.accounting]
    found = []
    for metric in ACCOUNTING_ROWS:
        if metric.group not in options.groups:
            continue
        result = family(metric, names)
        counted = [(key, total, row.since)
                   for key, row in zip(keys, snapshot.accounting, strict=True)
                   if (total := row.totals.get(metric.name)) is not None]
        result.rows = [(key, total) for key, total, _ in counted]
        result.created = [since for _, _, since in counted]
        if result.rows:
            found.append(result)
    return found
