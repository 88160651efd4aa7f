"""prometheus_client collectors over an ``ExporterState``.

``collect()`` builds fresh families on every call; ``describe()`` returns ``[]`` so that
registering a collector never triggers a collection. The HTTP app serves ``/metrics`` through
``render.MetricsRenderer`` instead (same bytes, cached per snapshot); this collector is the
reference the renderer is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector

from exporter.exposition.accounting import accounting_families
from exporter.exposition.created import stamp_created
from exporter.exposition.families import Family, FamilyData
from exporter.exposition.gpu import gpu_families
from exporter.exposition.health import health_families
from exporter.exposition.jobstats import jobstats_families
from exporter.exposition.processes import process_families
from exporter.exposition.self_metrics import self_families
from exporter.snapshot import Snapshot
from exporter.state import ExporterState, ExpositionOptions

__all__ = ["ExporterCollector", "build_registry", "snapshot_families"]

StateProvider = Callable[[], ExporterState]


def snapshot_families(snapshot: Snapshot, options: ExpositionOptions) -> list[FamilyData]:
    """Every per-GPU and per-process family of ``snapshot`` under ``options`` (as data),
    counters with the time each series counts from."""
    families = [*gpu_families(snapshot, options.groups),
                *health_families(snapshot, options.groups),
                *process_families(snapshot, options), *accounting_families(snapshot, options),
                *jobstats_families(snapshot, options.groups)]
    stamp_created(families, snapshot)
    return families


class ExporterCollector:
    """Everything gpu-exporter exposes, read from ``get_state()`` at each ``collect()``.

    For use with a plain ``CollectorRegistry`` (tests, ``generate_latest``); the HTTP app
    serves ``/metrics`` through ``MetricsRenderer``, which produces the same bytes faster.
    ``get_state`` is called once per collect; whatever it raises propagates to the caller.
    """

    def __init__(self, get_state: StateProvider, options: ExpositionOptions, *,
                 created: bool = False) -> None:
        """``created``: counters carry ``_created`` (for the OpenMetrics encoder only)."""
        self._get_state = get_state
        self._options = options
        self._created = created

    def collect(self) -> Iterator[Family]:
        """Fresh snapshot and self-metric families for the current state."""
        state = self._get_state()
        for data in snapshot_families(state.snapshot, self._options):
            yield data.to_family(self._created)
        for data in self_families(state):
            yield data.to_family(self._created)

    def describe(self) -> list[Family]:
        """Nothing: registration must not collect."""
        return []


def build_registry(
    get_state: StateProvider, options: ExpositionOptions, *, process_metrics: bool = True,
    created: bool = False,
) -> CollectorRegistry:
    """A fresh registry with ``ExporterCollector`` and, if asked, the ``process_*`` collector.

    No other default collectors (no ``python_gc_*``, no ``python_info``). ``created``: counters
    carry ``_created`` (what the OpenMetrics encoder should write).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(get_state, options, created=created))
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry
