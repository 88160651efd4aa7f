"""The chart ships the repository's own rules and dashboards, unchanged."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.deploy.helm_render import CHART_DIR, render
from tests.deploy.stack import REPO, dashboard_files, rule_files

FILES = CHART_DIR / "files"
#: Prometheus template snippets ({{ $labels.x }}, {{ $value | humanize }}, ...).
TEMPLATE = re.compile(r"\{\{.*?\}\}")


def _groups(path: Path) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return groups


def _repo_groups() -> list[dict[str, Any]]:
    return [g for path in rule_files() for g in _groups(path)]


def test_repository_has_the_files_the_chart_needs() -> None:
    assert [p.name for p in rule_files()] == [
        "gpu-exporter-accounting.yaml", "gpu-exporter-alerts.yaml",
        "gpu-exporter-recording.yaml"]
    assert len(dashboard_files()) >= 1


@pytest.mark.parametrize(("sources", "copies"), [
    (rule_files, FILES / "rules"),
    (dashboard_files, FILES / "dashboards"),
])
def test_chart_copies_are_the_repository_files_with_placeholders(sources: Any,
                                                                  copies: Path) -> None:
    """The chart's copies are the repository's files, but for the settings' placeholders
    (which the rendered PrometheusRule must fill with the defaults: the test below)."""
    originals = {p.name: p.read_text(encoding="utf-8") for p in sources()}
    copied = {p.name: p.read_text(encoding="utf-8") for p in copies.iterdir() if p.is_file()}
    assert sorted(copied) == sorted(originals), "run python -m dashboards.generate"
    for name, text in originals.items():
        if copies.name == "dashboards":  # the cost panels' unit, "short" unpriced
            assert copied[name].replace("\\u27e6currencyUnit\\u27e7", "short") == text, name
        else:  # each placeholder stands where the repository's file has a value
            pieces = re.split(r"⟦[^⟧]+⟧", copied[name])
            pattern = "[^ ,\n]+?".join(re.escape(piece) for piece in pieces)
            assert re.fullmatch(pattern, text), f"{name}: run python -m dashboards.generate"


def test_prometheus_rule_holds_exactly_the_repository_groups() -> None:
    rule = render().one("PrometheusRule")
    assert rule["spec"]["groups"] == _repo_groups()


def test_alert_templates_arrive_literally() -> None:
    """Helm must neither expand nor escape Prometheus' {{ ... }} templates."""
    manifest = render().one("PrometheusRule")
    rendered = TEMPLATE.findall(json.dumps(manifest["spec"], ensure_ascii=False))
    expected = [
        snippet
        for group in _repo_groups()
        for snippet in TEMPLATE.findall(json.dumps(group, ensure_ascii=False))
    ]
    # Helm writes annotation keys sorted: the same snippets, in another order.
    assert sorted(rendered) == sorted(expected)
    assert any("$value" in s for s in expected)
    assert any("$labels" in s for s in expected)


def test_rule_groups_can_be_switched_off() -> None:
    names = [g["name"] for g in _repo_groups()]
    assert len(names) >= 3
    off = [names[0], names[-1]]
    rule = render({"prometheusRule": {"disabledGroups": off}}).one("PrometheusRule")
    assert [g["name"] for g in rule["spec"]["groups"]] == names[1:-1]
    assert "PrometheusRule" not in render({"prometheusRule": {"disabledGroups": names}}).kinds()


def test_unknown_rule_group_is_a_clear_error() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r'no rule group named "gpu-tpyo"'):
        render({"prometheusRule": {"disabledGroups": ["gpu-tpyo"]}})


def test_prometheus_rule_labels_for_kube_prometheus_stack() -> None:
    rule = render({"prometheusRule": {"additionalLabels": {"release": "kps"}}}).one(
        "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_dashboard_config_maps_hold_the_repository_json() -> None:
    maps = render().of_kind("ConfigMap")
    data: dict[str, str] = {}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert "annotations" not in config_map["metadata"]
        assert len(config_map["data"]) == 1
        data.update(config_map["data"])
    assert data == {p.name: p.read_text(encoding="utf-8") for p in dashboard_files()}
    for text in data.values():
        json.loads(text)


def test_dashboard_label_folder_and_namespace_are_configurable() -> None:
    maps = render({"dashboards": {"label": "example.com/dashboard", "labelValue": "gpu",
                                  "namespace": "grafana", "folder": "GPUs",
                                  "folderAnnotation": "grafana_folder"}}).of_kind("ConfigMap")
    assert len(maps) == len(dashboard_files())
    for config_map in maps:
        meta = config_map["metadata"]
        assert meta["labels"]["example.com/dashboard"] == "gpu"
        assert "grafana_dashboard" not in meta["labels"]
        assert meta["namespace"] == "grafana"
        assert meta["annotations"] == {"grafana_folder": "GPUs"}


def _promtool_test(promtool: str, rules_dir: Path, files: dict[str, str]) -> tuple[int, str]:
    """Run dashboards/rules/tests/ against ``files`` (name -> text) laid out as in the repo."""
    (rules_dir / "tests").mkdir(parents=True)
    for name, text in files.items():
        (rules_dir / name).write_text(text, encoding="utf-8")
    tests = sorted((REPO / "dashboards" / "rules" / "tests").glob("*.yaml"))
    assert tests, "dashboards/rules/tests/ holds no promtool test"
    for test in tests:
        shutil.copy(test, rules_dir / "tests" / test.name)
    result = subprocess.run([promtool, "test", "rules", *(f"tests/{t.name}" for t in tests)],
                            cwd=rules_dir, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.stdout.count("Unit Testing:") == len(tests), result.stdout + result.stderr
    return result.returncode, result.stdout + result.stderr


@pytest.mark.slow
def test_rendered_rules_behave_like_the_repository_rules(tmp_path: Path) -> None:
    """The repository's promtool unit tests (alert texts included) give the same verdicts, test
    by test, on the rules as the chart renders them (split back into their files) as on the
    files themselves: rendering changed no expression, label or template."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (scripts/test does)"
    rendered = {g["name"]: g for g in render().one("PrometheusRule")["spec"]["groups"]}
    from_chart = {
        path.name: yaml.safe_dump({"groups": [rendered[g["name"]] for g in _groups(path)]})
        for path in rule_files()
    }
    originals = {path.name: path.read_text(encoding="utf-8") for path in rule_files()}
    chart_rc, chart_out = _promtool_test(promtool, tmp_path / "chart", from_chart)
    repo_rc, repo_out = _promtool_test(promtool, tmp_path / "repo", originals)
    assert (chart_rc, chart_out) == (repo_rc, repo_out)
    assert "SUCCESS" in chart_out
