"""The exporter's own families (group ``exporter``, always on), built fresh for every scrape.

They are cheap and some change between scrapes of one snapshot (data age, error counters),
so the renderer never caches them.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from functools import lru_cache
from importlib import metadata

import exporter
from exporter.catalogue import metrics
from exporter.exposition.families import FamilyData, family
from exporter.snapshot import Snapshot
from exporter.state import ExporterState

__all__ = ["collection_success", "nvml_binding_version", "self_families"]

#: The distribution that provides the ``pynvml`` module.
NVML_DISTRIBUTION = "nvidia-ml-py"


@lru_cache(maxsize=1)
def nvml_binding_version() -> str:
    """Installed nvidia-ml-py version, or ``"none"`` when it is not installed."""
    try:
        return metadata.version(NVML_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "none"


#: Error kinds that do not make a collection unsuccessful: the kubelet's PodResources API is
#: polled on its own thread, has its own health metrics and never affects the GPU readings.
ADVISORY_ERROR_KINDS: frozenset[str] = frozenset({"pod_resources"})


def collection_success(snapshot: Snapshot) -> bool:
    """True when the source was up, every GPU answered and no collection error was counted."""
    return (
        snapshot.source_up
        and all(gpu.up for gpu in snapshot.gpus)
        and not any(count > 0 for kind, count in snapshot.errors.items()
                    if kind not in ADVISORY_ERROR_KINDS)
    )


def self_families(state: ExporterState) -> Iterator[FamilyData]:
    """Build info, source health, collection outcome, data age and cumulative error counters."""
    snapshot = state.snapshot
    build = family(metrics.BUILD_INFO)
    build.add(
        (exporter.__version__, platform.python_version(), nvml_binding_version(), snapshot.source),
        1.0,
    )
    yield build
    source_up = family(metrics.SOURCE_UP)
    source_up.add((snapshot.source,), 1.0 if snapshot.source_up else 0.0)
    yield source_up
    success = family(metrics.COLLECTION_SUCCESS)
    success.add((), 1.0 if collection_success(snapshot) else 0.0)
    yield success
    duration = family(metrics.COLLECTION_DURATION)
    duration.add((), snapshot.duration_seconds)
    yield duration
    if state.last_success_timestamp is not None:
        last = family(metrics.LAST_SUCCESS)
        last.add((), state.last_success_timestamp)
        yield last
    age = family(metrics.DATA_AGE)
    age.add((), max(state.data_age_seconds, 0.0))
    yield age
    health = snapshot.pod_resources
    if health is not None:
        pod_resources = family(metrics.POD_RESOURCES_UP)
        pod_resources.add((), 1.0 if health.up else 0.0)
        yield pod_resources
        status = family(metrics.POD_RESOURCES_STATUS)
        status.add((health.status,), 1.0)
        yield status
    if state.web_config_reload_successful is not None:
        reload = family(metrics.WEB_CONFIG_RELOAD)
        reload.add((), 1.0 if state.web_config_reload_successful else 0.0)
        yield reload
    errors = family(metrics.ERRORS)
    for kind in sorted(state.errors_total):
        errors.add((kind,), state.errors_total[kind])
    if state.counting_since is not None:
        errors.created = [state.counting_since] * len(errors.rows)
    if errors.rows:
        yield errors
