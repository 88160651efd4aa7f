"""The exporter's own metric rows (group ``exporter``, always on)."""

from __future__ import annotations

from exporter.catalogue.metrics.core import GPU_LABELS, Group, Kind, Metric, Scope, Since


def _own(name: str, kind: Kind, labels: tuple[str, ...], help_text: str,
         charted: bool = True) -> Metric:
    return Metric(name, kind, Group.EXPORTER, help_text, labels=labels, scope=Scope.EXPORTER,
                  charted=charted, since=Since.EXPORTER if kind is Kind.COUNTER else None)


BUILD_INFO = _own(
    "gpu_exporter_build_info", Kind.INFO,
    ("version", "python_version", "nvml_binding_version", "source"),
    "Version of gpu-exporter and of what it runs on; value is always 1.",
)
SOURCE_UP = _own(
    "gpu_exporter_source_up", Kind.GAUGE, ("source",),
    "1 if the data source (NVML, or the simulator) is initialised and answering, else 0. "
    "With source=\"nvml\" this is NVML up.",
)
COLLECTION_SUCCESS = _own(
    "gpu_exporter_collection_success", Kind.GAUGE, (),
    "1 if the last collection read every GPU without error, else 0.",
)
COLLECTION_DURATION = _own(
    "gpu_exporter_collection_duration_seconds", Kind.GAUGE, (),
    "How long the last collection took, in seconds.",
)
LAST_SUCCESS = _own(
    "gpu_exporter_last_success_timestamp_seconds", Kind.GAUGE, (),
    "Unix time of the last collection that read every GPU, in seconds.", charted=False,
)
DATA_AGE = _own(
    "gpu_exporter_data_age_seconds", Kind.GAUGE, (),
    "Age of the data in this scrape, in seconds. Grows when collections hang or fail and the "
    "last good data is served instead.",
)
ERRORS = _own(
    "gpu_exporter_errors_total", Kind.COUNTER, ("kind",),
    "Problems met while collecting, by kind (gpu_lost, nvml_call, garbled_process_entry, "
    "collection_timeout, source_init, owner_lookup, ...).",
)
WEB_CONFIG_RELOAD = _own(
    "gpu_exporter_web_config_last_reload_successful", Kind.GAUGE, (),
    "1 if the last load of --web.config.file succeeded, 0 if the last reload failed and the "
    "previous config stays in force (absent without a web config file).", charted=False,
)
PROCESS_SERIES_OVERFLOW = _own(
    "gpu_exporter_process_series_overflow", Kind.GAUGE, GPU_LABELS,
    "Processes on this GPU folded into the overflow series because the per-GPU series cap was "
    "reached (0 when under the cap).",
)
