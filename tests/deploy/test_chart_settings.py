"""The chart's PrometheusRule and dashboards built from its values' settings: the same rules as
``python -m dashboards.generate --config`` for the same settings, and a changed threshold that
promtool sees fire where the default stays silent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from dashboards import generate
from exporter.catalogue import records
from exporter.catalogue.settings import parse
from tests.dashboards import promtool
from tests.dashboards.test_settings import EVERYTHING, EXAMPLE
from tests.deploy.helm_render import render

PRICES: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["cost"]


def _chart_groups(site: dict[str, Any]) -> dict[str, Any]:
    rule = render({"prometheusRule": site}).one("PrometheusRule")
    return {group["name"]: group for group in rule["spec"]["groups"]}


def _generated_groups(site: dict[str, Any]) -> dict[str, Any]:
    out = generate.site_outputs(parse(site))
    return {group["name"]: group for name, text in out.items() if name.startswith("rules/")
            for group in yaml.safe_load(text)["groups"]}


SITES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "every-setting-and-price": {**EVERYTHING, "cost": PRICES},
    "gpu-prices-only": {"cost": {"currency": "USD", "gpuHourPrices": [
        {"model": "NVIDIA (H100|H200).*", "price": 3.25}]}},
    "default-price-and-teams": {"cost": {"currency": "€", "defaultGpuHourPrice": 0.8,
                                         "teams": {"users": {"alice": "vision"}}}},
    "energy-only-namespaces": {"cost": {"currency": "CHF", "kwhPrice": 0.21, "teams": {
        "namespaces": {"ml-prod": "platform", "ml-dev": "platform"}}}},
}


@pytest.mark.parametrize("case", sorted(SITES))
def test_the_chart_builds_the_generators_rules(case: str) -> None:
    site = SITES[case]
    chart, generated = _chart_groups(site), _generated_groups(site)
    assert sorted(chart) == sorted(generated)
    for name, group in generated.items():
        assert chart[name] == group, name
    assert (records.COST_GROUP in chart) == ("cost" in site)


def test_no_prices_no_cost_group_and_prices_need_a_currency() -> None:
    assert records.COST_GROUP not in _chart_groups({"cost": {"currency": "EUR"}})
    with pytest.raises(helm_python.HelmRenderError, match="prices need a currency"):
        render({"prometheusRule": {"cost": {"kwhPrice": 0.3}}})


def test_the_cost_group_can_be_switched_off_like_the_others() -> None:
    site = {"cost": PRICES, "disabledGroups": [records.COST_GROUP]}
    assert records.COST_GROUP not in _chart_groups(site)


def test_the_dashboards_show_the_currency() -> None:
    maps = render({"prometheusRule": {"cost": PRICES}}).of_kind("ConfigMap")
    (efficiency,) = [json.loads(text) for m in maps for name, text in m["data"].items()
                     if name == "gpu-efficiency.json"]
    units = json.dumps(efficiency)
    assert '"suffix: EUR"' in units
    assert "u27e6" not in units


def _memory_test(rule_file: Path) -> dict[str, Any]:
    """A GPU at 60 % memory for 20 minutes: GpuMemoryAlmostFull fires at a 0.5 threshold."""
    return {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'gpu_memory_used_bytes{instance="h", gpu="0", uuid="GPU-0"}',
                 "values": "60x30"},
                {"series": 'gpu_memory_total_bytes{instance="h", gpu="0", uuid="GPU-0"}',
                 "values": "100x30"},
            ],
            "alert_rule_test": [{
                "eval_time": "20m", "alertname": "GpuMemoryAlmostFull",
                "exp_alerts": [{"exp_labels": {"instance": "h", "gpu": "0", "uuid": "GPU-0",
                                               "severity": "warning", "audience": "operator"},
                                "exp_annotations": {}}],
            }],
        }],
    }


def test_a_threshold_from_the_values_fires_in_promtool(tmp_path: Path) -> None:
    for case, site in (("changed", {"thresholds": {"memoryUsedRatio": 0.5,
                                                   "memoryUsedFor": "10m"}}),
                       ("default", {})):
        groups = list(_chart_groups(site).values())
        for group in groups:  # the wording is annotations.test.yaml's; here the behaviour
            for rule in group["rules"]:
                rule.pop("annotations", None)
        rule_file = tmp_path / f"{case}.yaml"
        rule_file.write_text(yaml.safe_dump({"groups": groups}))
        check = promtool.run("check", "rules", rule_file)
        assert check.returncode == 0, check.stdout + check.stderr
        test_file = tmp_path / f"{case}.test.yaml"
        test_file.write_text(yaml.safe_dump(_memory_test(rule_file)))
        result = promtool.run("test", "rules", test_file)
        if case == "changed":
            assert result.returncode == 0, result.stdout + result.stderr
        else:  # 60 % is under the default 90 %: the same test fails
            assert result.returncode != 0, result.stdout
            assert "GpuMemoryAlmostFull" in result.stdout + result.stderr


def test_the_example_settings_as_values_give_the_tested_cost_rules() -> None:
    """The cost rules promtool tests with known amounts (cost.test.yaml) are exactly the
    chart's for the same prices."""
    example = yaml.safe_load(EXAMPLE.read_text())
    tested = yaml.safe_load((promtool.TESTS_DIR / "rules" / generate.COST_FILE).read_text())
    assert [_chart_groups(example)[records.COST_GROUP]] == tested["groups"]
