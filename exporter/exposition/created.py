"""The Unix time each counter series counts from: its OpenMetrics ``_created``.

A counter that starts mid-life (a user, pod or Slurm job appears; an XID code is seen for the
first time) loses its first increase in ``rate()`` and ``increase()`` unless the scraper knows
when it was 0: OpenMetrics' ``_created`` says so (Prometheus ingests it as a zero sample with
its created-timestamp feature). Every counter row says where its zero lies (``Metric.since``):

- ``Since.DRIVER``: NVML counts since the driver loaded: the host's boot (``Snapshot.booted_at``);
- ``Since.EXPORTER``: the exporter counts since its source started (``Snapshot.started_at``;
  the error counters since the scheduler started);
- ``Since.SERIES``: each accounting row from the start of the first interval it counted
  (``AccountingRow.since``);
- ``Since.PROCESS``: a process's own counters since it started (its start time);
- ``Since.LIFETIME``: the GPU's lifetime (InfoROM): nothing, since no zero is known (a
  made-up one would make Prometheus invent an increase of the whole lifetime count).

The text format is left as it is: prometheus_client would write ``_created`` there as a gauge
family of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter.catalogue.metrics import Kind, Metric, Since
from exporter.exposition.families import FamilyData
from exporter.snapshot import Snapshot

__all__ = ["stamp_created", "started"]


def started(metric: Metric, snapshot: Snapshot) -> float | None:
    """When every series of a ``Since.DRIVER`` / ``Since.EXPORTER`` counter counts from (None:
    another kind of start, or unknown)."""
    if metric.since is Since.DRIVER:
        return snapshot.booted_at
    if metric.since is Since.EXPORTER:
        return snapshot.started_at
    return None


def stamp_created(families: Iterable[FamilyData], snapshot: Snapshot) -> None:
    """Give the counter families that have no ``created`` yet their source's start."""
    for data in families:
        if data.metric.kind is not Kind.COUNTER or data.created is not None:
            continue
        start = started(data.metric, snapshot)
        if start is not None:
            data.created = [start] * len(data.rows)
