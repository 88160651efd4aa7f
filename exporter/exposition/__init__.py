"""Exposition: ``ExporterState`` -> Prometheus text / OpenMetrics, and typed JSON.

Public API (what ``exporter/web/app.py`` uses)::

    from exporter.exposition import MetricsRenderer
    from exporter.exposition.json_model import SnapshotResponse  # pydantic: imported lazily

    renderer = MetricsRenderer()              # one per app; thread-safe; process_*=True
    body, headers = renderer.render(state, options, accept, accept_encoding)
    # state: ExporterState (fresh per scrape: data_age_seconds is read from it)
    # options: ExpositionOptions; accept / accept_encoding: raw request headers or None
    # headers: {"Content-Type": ..., "Vary": ..., ["Content-Encoding": "gzip"]}
    # -> Response(content=body, headers=headers); never raises on odd headers

    SnapshotResponse.from_state(state, options) -> SnapshotResponse  # /api/v1/snapshot
    # use as FastAPI response_model=SnapshotResponse

Also available:

- ``build_registry(get_state, options, *, process_metrics=True) -> CollectorRegistry``:
  a fresh registry holding ``ExporterCollector`` (and ``process_*``), for
  ``prometheus_client.generate_latest`` or tests. Same bytes as the renderer, uncached.
- ``ExporterCollector(get_state, options)``: the prometheus_client collector
  (``collect()`` builds fresh families, ``describe()`` returns ``[]``).
- ``snapshot_families(snapshot, options)`` / ``self_families(state)``: the family lists.
- ``negotiate(accept) -> (encoder, content_type)``, ``gzip_accepted(accept_encoding)``.
- ``collection_success(snapshot)``: the value of ``gpu_exporter_collection_success``.

Modules: ``families`` (metric row -> family), ``gpu`` (per-GPU rows), ``health`` (XIDs,
memory repair, MIG), ``processes`` (per-process/per-user, cap, overflow), ``accounting``
(idle-accounting counters), ``self_metrics``, ``collector``, ``encode`` (text and OpenMetrics
written directly), ``render`` (per-snapshot cache, gzip), ``json_model`` (not re-exported here:
its pydantic models load on the first JSON request).
"""

from __future__ import annotations

from exporter.exposition.collector import ExporterCollector, build_registry, snapshot_families
from exporter.exposition.render import MetricsRenderer, gzip_accepted, negotiate
from exporter.exposition.self_metrics import collection_success, self_families

__all__ = [
    "ExporterCollector",
    "MetricsRenderer",
    "build_registry",
    "collection_success",
    "gzip_accepted",
    "negotiate",
    "self_families",
    "snapshot_families",
]
