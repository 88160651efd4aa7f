"""The efficiency dashboard counts GPU time in GPU-hours, as gpu-exporter report does."""

from __future__ import annotations

from dashboards.panels import GPU_HOURS
from exporter.catalogue import records
from tests.dashboards.grafana import GRAFANA_DIR, Json, load, visual_panels

BOARD = load(GRAFANA_DIR / "gpu-efficiency.json")


def _units(panel: Json) -> dict[str, str]:
    """Column or panel name -> unit (a table's columns through their overrides)."""
    field_config = panel["fieldConfig"]
    units = {panel["title"]: field_config["defaults"].get("unit", "")}
    for override in field_config.get("overrides", []):
        for prop in override["properties"]:
            if prop["id"] == "unit":
                units[override["matcher"]["options"]] = prop["value"]
    return units


def test_gpu_time_is_in_gpu_hours_everywhere() -> None:
    by_title = {panel["title"]: panel for panel in visual_panels(BOARD)}
    for title, record in (("GPU-hours held", records.HELD_GPUS),
                          ("GPU-hours used", records.USED_GPUS),
                          ("GPU-hours held idle", records.IDLE_GPUS)):
        assert _units(by_title[title])[title] == GPU_HOURS
        (target,) = by_title[title]["targets"]
        assert records.USER.record(record) in target["expr"]
        assert target["expr"].endswith(f" * {records.INTERVAL_SECONDS} / 3600")
    for title in ("Per user", "Per namespace and pod"):
        units = _units(by_title[title])
        for column in ("Idle GPU-hours", "Held GPU-hours", "Used GPU-hours"):
            assert units[column] == GPU_HOURS, (title, column)
    # No GPU time is left in seconds (Grafana would show "2 day" for 48 GPU-hours).
    for panel in visual_panels(BOARD):
        assert "s" not in _units(panel).values(), panel["title"]
