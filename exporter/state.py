"""What the scheduler hands to exposition: the snapshot plus the exporter's own bookkeeping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue.metrics import Group, default_groups
from exporter.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class ExporterState:
    """One scrape's view: the snapshot to serve and how fresh it is.

    ``stale`` is True when the snapshot is older than the freshness limit (a collection hung or
    failed and the last good data is served). ``errors_total`` is cumulative since start.
    ``web_config_reload_successful`` is the outcome of the last web config (re)load (None: no
    web config file).
    """

    snapshot: Snapshot
    data_age_seconds: float
    stale: bool
    last_success_timestamp: float | None
    errors_total: Mapping[str, int] = field(default_factory=dict)
    web_config_reload_successful: bool | None = None
    counting_since: float | None = None  # Unix seconds ``errors_total`` counts from


@dataclass(frozen=True, slots=True)
class ExpositionOptions:
    """How snapshots are turned into series (cardinality and privacy knobs)."""

    groups: frozenset[Group] = field(default_factory=default_groups)
    pid_label: bool = True
    max_process_series_per_gpu: int = 64
    workload_labels: WorkloadLabels = field(default_factory=WorkloadLabels)  # kinds switched on
