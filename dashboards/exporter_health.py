"""Dashboard 4: the exporter itself - targets up, collections, data age, errors."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import panels, recording, variables
from dashboards.fleet import COUNT_BAD, COUNT_WARN
from dashboards.promql import count_or_zero, sel, sel_record
from dashboards.variables import HOST
from exporter.catalogue import metrics, thresholds

UID = "gpu-exporter-health"
def _stale() -> tuple[panels.Step, ...]:
    """Data age colours: red from the stale-data alert's threshold."""
    return (("green", None), ("red", thresholds.DATA_STALE_SECONDS))


def _targets(grid: panels.Layout) -> None:
    grid.row("Targets")
    grid.add(panels.stat_panel(
        "Targets up", "Exporters Prometheus scraped successfully last time.", "short",
        panels.query(f"sum(up{{{HOST}}})"),
    ), 4, 4)
    # Exporters whose up-style series is 0, counted (0, not "no data", when there are none).
    for title, description, series, colours in (
        ("Targets down", "Exporters Prometheus could not scrape (alert GpuExporterDown after "
         f"{thresholds.EXPORTER_DOWN_FOR}).", f"up{{{HOST}}}", COUNT_BAD),
        ("Sources down", "Exporters whose data source (NVML) is not initialised: no GPU data "
         "from them at all.", sel(metrics.SOURCE_UP, HOST), COUNT_BAD),
        ("Failing collections", "Exporters whose last collection did not read every GPU "
         "without error.", sel(metrics.COLLECTION_SUCCESS, HOST), COUNT_WARN),
    ):
        grid.add(panels.stat_panel(
            title, description, "short", panels.query(count_or_zero(f"{series} == 0")),
            thresholds=panels.steps(*colours),
        ), 4, 4)
    grid.add(panels.stat_panel(
        "Oldest data", "Age of the oldest data served by the selected exporters. It grows when "
        "collections hang and the last good snapshot is served; red past "
        f"{thresholds.DATA_STALE_SECONDS:.0f} s (alert GpuExporterDataStale).", "s",
        panels.query(f"max({sel(metrics.DATA_AGE, HOST)})"),
        thresholds=panels.steps(*_stale()),
    ), 4, 4)
    grid.add(panels.stat_panel(
        "Slowest collection", "Duration of the slowest last collection among the selected "
        "exporters.", "s", panels.query(f"max({sel(metrics.COLLECTION_DURATION, HOST)})"),
    ), 4, 4)
    grid.add(panels.timeseries_panel(
        "Up", "1 when Prometheus scraped the target, 0 when the scrape failed.", "short",
        [panels.query(f"up{{{HOST}}}", "{{instance}}")], min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Collection success and source up", "1 when the last collection read every GPU "
        "without error, and when the source (NVML) is up.", "short",
        [panels.query(sel(metrics.COLLECTION_SUCCESS, HOST), "{{instance}} collection"),
         panels.query(sel(metrics.SOURCE_UP, HOST), "{{instance}} {{source}} source")],
        min_val=0, max_val=1,
    ), 12)


def _collections(grid: panels.Layout) -> None:
    grid.row("Collections")
    grid.add(panels.timeseries_panel(
        "Collection duration", "How long each exporter's last collection took. NVML calls "
        "cost milliseconds per GPU; seconds mean a hung driver call.", "s",
        [panels.query(sel(metrics.COLLECTION_DURATION, HOST), "{{instance}}")], min_val=0,
    ), 8)
    grid.add(panels.timeseries_panel(
        "Data age", "Age of the data in each scrape. Dashed line: the stale-data alert "
        "threshold.", "s", [panels.query(sel(metrics.DATA_AGE, HOST), "{{instance}}")],
        thresholds=panels.steps(*_stale()), min_val=0,
    ), 8)
    grid.add(panels.timeseries_panel(
        "Scrape duration", "How long Prometheus's scrape of each exporter took (measured by "
        "Prometheus).", "s", [panels.query(f"scrape_duration_seconds{{{HOST}}}", "{{instance}}")],
        min_val=0,
    ), 8)
    grid.add(panels.timeseries_panel(
        "Errors by kind", "Problems met while collecting, per interval and kind (gpu_lost, "
        "nvml_call, garbled_process_entry, collection_timeout, owner_lookup ...).", "short",
        [panels.sum_by("kind", f"increase({sel(metrics.ERRORS, HOST)}[$__rate_interval])")],
        min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Process series folded into overflow", "Processes per GPU beyond the exporter's "
        "--process.max-series-per-gpu cap, summed into one overflow series.", "short",
        [panels.sum_by("instance", sel_record(recording.INSTANCE_OVERFLOW, HOST))], min_val=0,
    ), 12)
    grid.add(panels.table_panel(
        "Exporters", "Version and data source of each exporter.",
        [panels.Column("Up", f"up{{{HOST}}} * on (job, instance) group_left (version, "
                       f"python_version, nvml_binding_version, source) "
                       f"{sel(metrics.BUILD_INFO, HOST)}", "short")],
        hidden=("Time", "__name__"),
    ), 24, 7)


def build() -> dashboard.Dashboard:
    """The exporter health dashboard builder."""
    built = panels.board(
        "GPU exporter health", UID,
        "Is gpu-exporter itself working: targets, collections, data age, errors.",
        [variables.datasource(), variables.job(metrics.BUILD_INFO), variables.target()],
    )
    grid = panels.Layout(built)
    _targets(grid)
    _collections(grid)
    return built
