"""The committed Grafana dashboards: loadable, provisioning-safe, consistent, up to date."""

from __future__ import annotations

import itertools
import re
import shutil
import warnings
from pathlib import Path

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as dashboard_model

from dashboards import accounting, alerts, cost, generate, recording
from dashboards.panels import UNITS
from exporter.catalogue import metrics as catalogue
from exporter.catalogue import thresholds
from tests.dashboards.grafana import (
    BUILTIN_VARIABLES,
    DASHBOARD_FILES,
    GRAFANA_DIR,
    Json,
    load,
    panels,
    referenced_variables,
    targets,
    variables,
    visual_panels,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Series Prometheus itself makes, allowed in queries next to the catalogue's.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds"})
#: Alert states Prometheus records for our alerts (``ALERTS{alertname="Gpu..."}``).
ALERTS = re.compile(r'ALERTS\{alertname="Gpu[A-Za-z]+"')
BOARDS = {path.name: load(path) for path in DASHBOARD_FILES}
NAMES = sorted(BOARDS)


def test_the_dashboards_exist_with_stable_uids() -> None:
    assert sorted(generate.DASHBOARDS) == NAMES
    uids = {name: board["uid"] for name, board in BOARDS.items()}
    assert uids == {
        "gpu-exporter-health.json": "gpu-exporter-health",
        "gpu-efficiency.json": "gpu-exporter-efficiency",
        "gpu-fleet-overview.json": "gpu-exporter-fleet",
        "gpu-node-device.json": "gpu-exporter-node",
        "gpu-users-processes.json": "gpu-exporter-users",
        "gpu-workloads.json": "gpu-exporter-workloads",
    }
    assert len({b["title"] for b in BOARDS.values()}) == len(BOARDS)


@pytest.mark.parametrize("name", NAMES)
def test_loads_into_the_sdk_model_and_round_trips(name: str) -> None:
    register_default_plugins()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = dashboard_model.Dashboard.from_json(BOARDS[name])
    assert isinstance(model, dashboard_model.Dashboard)
    assert model.uid == BOARDS[name]["uid"]
    again = JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"
    assert again == (GRAFANA_DIR / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_and_query_uses_the_datasource_variable(name: str) -> None:
    board = BOARDS[name]
    text = (GRAFANA_DIR / name).read_text(encoding="utf-8")
    assert "__inputs" not in text
    assert "DS_PROMETHEUS" not in text
    ds_vars = [v for v in variables(board) if v["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in ds_vars] == [("datasource", "prometheus")]
    assert list(visual_panels(board)), "no panels"
    for panel in visual_panels(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
    for panel, target in targets(board):
        assert target["datasource"] == DATASOURCE, panel["title"]
        assert target["refId"], panel["title"]
    for var in variables(board):
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


@pytest.mark.parametrize("name", NAMES)
def test_ids_are_unique_and_panels_do_not_overlap(name: str) -> None:
    all_panels = list(panels(BOARDS[name]))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    assert all(isinstance(i, int) and i > 0 for i in ids)
    boxes = []
    for panel in all_panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0
        assert pos["y"] >= 0
        assert pos["w"] > 0
        assert pos["h"] > 0
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        boxes.append((panel["title"], pos["x"], pos["y"], pos["x"] + pos["w"], pos["y"] + pos["h"]))
    for a, b in itertools.combinations(boxes, 2):
        overlap = a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
        assert not overlap, f"{a[0]!r} overlaps {b[0]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_every_referenced_variable_exists_and_is_defined_before_use(name: str) -> None:
    board = BOARDS[name]
    defined: list[str] = []
    for var in variables(board):
        used = referenced_variables(str(var.get("query", "")))
        assert used <= set(defined), f"{var['name']} uses {used - set(defined)} before definition"
        defined.append(var["name"])
    for panel, target in targets(board):
        used = referenced_variables(target["expr"]) - BUILTIN_VARIABLES
        assert used <= set(defined), f"{panel['title']}: unknown {used - set(defined)}"


def test_variables_chain_job_node_instance_gpu_user() -> None:
    node = {v["name"]: v for v in variables(BOARDS["gpu-node-device.json"])}
    users = {v["name"]: v for v in variables(BOARDS["gpu-users-processes.json"])}
    assert list(node) == ["datasource", "job", "node", "instance", "gpu"]
    assert "$job" in node["node"]["query"]
    assert "hostname" in node["node"]["query"]
    assert "$node" in node["instance"]["query"]
    assert node["instance"]["hide"] == 2
    assert "$instance" in node["gpu"]["query"]
    assert "$instance" in users["user"]["query"]
    assert node["node"]["multi"] is False  # one node at a time on the device dashboard


@pytest.mark.parametrize("name", NAMES)
def test_units_titles_and_descriptions(name: str) -> None:
    for panel in visual_panels(BOARDS[name]):
        assert panel["title"]
        assert len(panel.get("description", "")) > 30, panel["title"]
        units = {panel["fieldConfig"]["defaults"].get("unit")}
        for override in panel["fieldConfig"].get("overrides", []):
            units |= {p["value"] for p in override["properties"] if p["id"] == "unit"}
        assert units <= UNITS, f"{panel['title']}: {units - UNITS}"


@pytest.mark.parametrize("name", NAMES)
def test_queries_use_only_catalogue_metrics(name: str) -> None:
    known = {m.name for m in catalogue.CATALOGUE} | PROMETHEUS_SERIES
    # The cost records of a site with every price and a team mapping (the chart's copy).
    records = {r.record for r in (*recording.all_records(), *alerts.all_records(),
                                  *accounting.all_records(), *cost.chart_group().rules)}
    for panel, target in targets(BOARDS[name]):
        expr = re.sub(r'"[^"]*"', '""', target["expr"])  # drop label values
        for word in re.findall(r"\b(gpu_[a-z_]+|up|scrape_[a-z_]+)\b(?=\s*[{\[)]|\s|$)", expr):
            assert word in known, f"{panel['title']}: unknown metric {word}"
        for word in re.findall(r"\b[a-z_]+:[a-z_0-9:]+", expr):
            assert word in records, f"{panel['title']}: no recording rule {word}"
        assert ("gpu" in target["expr"] or "up{" in target["expr"]
                or "scrape_" in target["expr"] or ALERTS.search(target["expr"]))


def _steps(panel: Json) -> list[float]:
    return [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            if s["value"] is not None]


def test_colour_thresholds_equal_the_alert_thresholds() -> None:
    checked = 0
    for board in BOARDS.values():
        for panel in visual_panels(board):
            unit = panel["fieldConfig"]["defaults"].get("unit")
            exprs = " ".join(target["expr"] for target in panel["targets"])
            if unit == "celsius":
                assert _steps(panel)[-2:] == [
                    thresholds.TEMPERATURE_WARNING_CELSIUS,
                    thresholds.TEMPERATURE_CRITICAL_CELSIUS,
                ], panel["title"]
                checked += 1
            elif unit == "percentunit" and re.search(
                r"^\(?(sum\()?gpu_memory_used_bytes[^/]* / (sum\()?gpu_memory_total_bytes"
                r"|^\(?(sum\()?instance:gpu_memory_used_bytes:sum[^/]* / "
                r"|gpu_memory_used:ratio", exprs
            ):
                assert _steps(panel)[-1] == thresholds.MEMORY_USED_RATIO, panel["title"]
                checked += 1
            elif unit == "s" and "data_age" in exprs:
                assert _steps(panel)[-1] == thresholds.DATA_STALE_SECONDS, panel["title"]
                checked += 1
    assert checked >= 7


def test_committed_files_equal_generated() -> None:
    assert generate.stale_files(generate.REPO) == []
    assert generate.main(["--check"]) == 0


def _scratch_tree(tmp_path: Path) -> Path:
    """A copy of what the generator reads and writes."""
    for part in ("dashboards/grafana", "dashboards/rules", "dashboards/notifications",
                 "helm/gpu-exporter/files", "tests/golden"):
        shutil.copytree(generate.REPO / part, tmp_path / part)
    for template in generate.TEMPLATES:
        (tmp_path / template).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(generate.REPO / template, tmp_path / template)
    return tmp_path


def test_check_fails_on_drift_and_write_repairs_it(tmp_path: Path) -> None:
    root = _scratch_tree(tmp_path)
    assert generate.main(["--check", "--root", str(root)]) == 0
    fleet = root / "dashboards" / "grafana" / "gpu-fleet-overview.json"
    fleet.write_text(fleet.read_text().replace("GPU fleet overview", "edited by hand"))
    (root / "dashboards" / "rules" / "gpu-exporter-alerts.yaml").unlink()
    copies = root / "helm" / "gpu-exporter" / "files"
    (copies / "rules" / "gpu-exporter-recording.yaml").write_text("groups: []\n")
    (copies / "dashboards" / "old.json").write_text("{}")
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("`gpu_memory_used_bytes`", "`renamed`"))
    assert generate.main(["--check", "--root", str(root)]) == 1
    assert sorted(generate.write(root)) == [
        "README.md",
        "dashboards/grafana/gpu-fleet-overview.json",
        "dashboards/rules/gpu-exporter-alerts.yaml",
        "helm/gpu-exporter/files/dashboards/old.json",
        "helm/gpu-exporter/files/rules/gpu-exporter-recording.yaml",
    ]
    assert not (copies / "dashboards" / "old.json").exists()
    assert generate.main(["--check", "--root", str(root)]) == 0


def test_readme_without_markers_is_a_clear_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = _scratch_tree(tmp_path)
    (root / "README.md").write_text("# nothing here\n")
    assert generate.main(["--check", "--root", str(root)]) == 2
    assert "BEGIN HEADLINE TABLE" in capsys.readouterr().err
