"""Metric families as plain data, built fresh from catalogue entries for every snapshot.

Every family's name, type, help and unit comes from its row in ``exporter.catalogue.metrics``;
nothing here types a metric name. A ``FamilyData`` is a list of (label values, value) rows
(a counter's also the Unix time each row counts from: its OpenMetrics ``_created``,
``exporter.exposition.created``); it becomes a prometheus_client family with ``to_family()``
(for the collector and the fallback encoder) or is encoded directly by
``exporter.exposition.encode`` (the fast path, byte-identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric as Family

from exporter.catalogue.metrics import Kind, Metric, Value
from exporter.snapshot import GpuIdentity

__all__ = ["Family", "FamilyData", "family", "gpu_label_values"]

Row = tuple[tuple[str, ...], float]


@dataclass(slots=True)
class FamilyData:
    """One family: a catalogue metric, its label names, and its samples.

    For info metrics the value of each row is ignored (always exposed as 1). ``created``
    (counters only; None: no row has one) holds per row the Unix time it counts from (None
    for a row without one), which OpenMetrics exposes as ``<family>_created``.
    """

    metric: Metric
    labels: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)
    created: list[float | None] | None = None

    def add(self, values: tuple[str, ...], value: float) -> None:
        """Append one sample; ``values`` are in the order of ``labels``."""
        self.rows.append((values, value))

    def add_value(self, values: tuple[str, ...], value: Value) -> None:
        """Append a stored value: a number is one sample; a mapping one sample per value of
        the row's extra label, in ``label_values`` order (others are left out, so a driver's
        new reason cannot create surprise series)."""
        rows = self.rows
        if isinstance(value, (int, float)):
            rows.append((values, value))
            return
        for label in self.metric.label_values:
            labelled = value.get(label)
            if labelled is not None:
                rows.append(((*values, label), labelled))

    def to_family(self, created: bool = False) -> Family:
        """The equivalent prometheus_client family (fresh object); with ``created``, counters
        carry their ``_created`` samples (OpenMetrics: the text format would turn them into
        gauges of their own, so they are left out there).

        Raises:
            ValueError: the catalogue entry is not a valid Prometheus metric (a catalogue bug).
        """
        metric, names = self.metric, list(self.labels)
        if metric.kind is Kind.INFO:
            info = InfoMetricFamily(metric.family_name, metric.help, labels=names)
            for values, _ in self.rows:
                info.add_metric(values, {})
            return info
        if metric.kind is Kind.COUNTER:
            counter = CounterMetricFamily(
                metric.family_name, metric.help, labels=names, unit=metric.unit
            )
            starts = self.created if created and self.created is not None else None
            for index, (values, value) in enumerate(self.rows):
                counter.add_metric(values, value,
                                   created=None if starts is None else starts[index])
            return counter
        gauge = GaugeMetricFamily(metric.family_name, metric.help, labels=names, unit=metric.unit)
        for values, value in self.rows:
            gauge.add_metric(values, value)
        return gauge


def family(metric: Metric, labels: Sequence[str] | None = None) -> FamilyData:
    """An empty family for ``metric`` with label names ``labels`` (default: the catalogue's).

    ``labels`` differs from the catalogue only for per-process metrics (``pid`` dropped,
    Kubernetes labels appended by configuration).
    """
    return FamilyData(metric, tuple(metric.labels if labels is None else labels))


def gpu_label_values(identity: GpuIdentity) -> tuple[str, str]:
    """Values of ``metrics.GPU_LABELS`` (gpu index as a string, uuid) for one GPU."""
    return (str(identity.index), identity.uuid)
