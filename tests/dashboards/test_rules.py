"""The generated Prometheus rules: promtool-clean, unit-tested, well-formed, tuned as documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import alerts, escalation, owners, recording, rules
from dashboards.promql import num, seconds
from exporter.catalogue import thresholds
from exporter.sources.simulated import list_presets
from tests.dashboards import promtool
from tests.dashboards.promtool import RULES_DIR, TESTS_DIR

ALERTS_YAML = RULES_DIR / "gpu-exporter-alerts.yaml"
RECORDING_YAML = RULES_DIR / "gpu-exporter-recording.yaml"
RUNBOOK = RULES_DIR.parent / "runbooks" / rules.RUNBOOK_FILE


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in _load(path)["groups"] for rule in group["rules"]]


def _alert(name: str) -> dict[str, Any]:
    return next(r for r in _rules(ALERTS_YAML) if r.get("alert") == name)


def _unit_tests() -> list[dict[str, Any]]:
    return [
        case for path in sorted(TESTS_DIR.glob("*.test.yaml")) for case in _load(path)["tests"]
    ]


def test_promtool_check_rules_is_clean() -> None:
    result = promtool.run("check", "rules", "--lint=all", "--lint-fatal", ALERTS_YAML,
                          RECORDING_YAML)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 2


def test_promtool_unit_tests_pass_as_documented() -> None:
    """``promtool test rules dashboards/rules/tests/*.yaml`` from the repository root."""
    files = promtool.test_files()
    assert len(files) >= 7
    result = promtool.run("test", "rules", *files, cwd=promtool.ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(files)


def test_annotation_wording_renders() -> None:
    result = promtool.run("test", "rules", TESTS_DIR / promtool.ANNOTATIONS_TEST)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("constant", "value"),
    [
        ("MEMORY_USED_RATIO", 0.89),
        ("TEMPERATURE_WARNING_CELSIUS", 79.0),
        ("IDLE_UTILIZATION_RATIO", 0.051),
        ("LEAK_MIN_GROWTH_RATIO", 0.0),
        ("ERRORS_THRESHOLD", 5),
    ],
)
def test_unit_tests_catch_a_shifted_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, constant: str, value: float
) -> None:
    """The edge cases are real: moving one threshold a little makes promtool fail."""
    monkeypatch.setattr(thresholds, constant, value)
    shifted = rules.render(alerts.groups(), "alerts.py", annotations=False)
    staged = [p for p in promtool.stage_tests(tmp_path, shifted)
              if p.name != promtool.ANNOTATIONS_TEST]
    result = promtool.run("test", "rules", *staged)
    assert result.returncode != 0, f"{constant}={value} went unnoticed:\n{result.stdout}"


def test_every_alert_has_a_firing_and_a_silent_unit_test() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for case in _unit_tests():
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a.alert for a in alerts.all_alerts()}
    assert names - firing == set(), "alerts never shown to fire"
    assert names - silent == set(), "alerts never shown to stay silent"


def test_every_recording_rule_is_unit_tested() -> None:
    exprs = " ".join(
        check["expr"] for case in _unit_tests() for check in case.get("promql_expr_test", [])
    )
    records = (*recording.all_records(), *alerts.all_records())
    untested = {r.record for r in records if r.record not in exprs}
    # The plain sums feed the ratios; the ratios and counts are tested directly.
    assert untested <= {
        "instance:gpu_memory_used_bytes:sum", "instance:gpu_memory_total_bytes:sum",
        "instance:gpu_utilization_ratio:avg", "instance:gpu_power_usage_watts:sum",
        "job:gpu_memory_used_bytes:sum", "job:gpu_memory_total_bytes:sum",
    }


def test_alerts_follow_the_conventions() -> None:
    runbook_anchors = {
        line[3:].strip().lower() for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    for group in _load(ALERTS_YAML)["groups"]:
        earlier: set[str] = set()
        for rule in group["rules"]:
            if "record" in rule:
                earlier.add(rule["record"])
                continue
            _check_alert(rule, runbook_anchors)
            # Alerts read raw metrics, or recording rules of their own group evaluated before
            # them, so they work with the recording groups switched off.
            reads = set(re.findall(r"[a-z_]+:[a-z_0-9:]+", re.sub(r"\[[^\]]*\]", "",
                                                                   rule["expr"])))
            assert reads <= earlier, (rule["alert"], reads - earlier)


def _check_alert(rule: dict[str, Any], runbook_anchors: set[str]) -> None:
    """Name, severity, annotations and runbook section of one alerting rule."""
    name = rule["alert"]
    assert re.fullmatch(r"Gpu[A-Z][A-Za-z]+", name), name
    assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
    assert rule["labels"].get("audience") in ("owner", "operator"), f"{name}: no audience"
    notes = rule["annotations"]
    assert notes["summary"][0].isupper(), name
    assert notes["summary"].endswith("."), name
    assert "{{ $labels." in notes["description"] or "{{ $value" in notes["description"]
    url = f"{rules.RUNBOOK_BASE_URL}{rules.RUNBOOK_FILE}#{name.lower()}"
    assert notes["runbook_url"] == url
    assert name.lower() in runbook_anchors, f"no '## {name}' section in {RUNBOOK}"


@pytest.mark.parametrize("alert", alerts.all_alerts(), ids=lambda rule: rule.alert)
def test_every_alert_declares_its_docs_and_its_live_check(alert: rules.AlertRule) -> None:
    """The runbook section, the README row and the live test's trigger follow from these."""
    assert alert.when, alert.alert
    assert "|" not in alert.when, alert.alert
    assert alert.runbook.strip().startswith("**Meaning:**"), alert.alert
    assert not re.search(r"(?m)^#", alert.runbook), f"{alert.alert}: headings in its runbook"
    live = alert.live
    assert bool(live.fires) != bool(live.reason), f"{alert.alert}: fires_under() or not_live()"
    scenarios = {*list_presets(), "down"}  # "down": the live test's target nobody listens on
    assert {scenario for scenario, _ in live.fires} <= scenarios, alert.alert
    assert not live.only_that_gpu or all(gpu is not None for _, gpu in live.fires)


def test_groups_are_unique_and_several_per_file() -> None:
    names = [g["name"] for p in (ALERTS_YAML, RECORDING_YAML) for g in _load(p)["groups"]]
    assert len(names) == len(set(names))
    assert len(_load(ALERTS_YAML)["groups"]) >= 3
    assert len(_load(RECORDING_YAML)["groups"]) >= 2


def test_recording_rules_are_named_level_metric_operations() -> None:
    for rule in _rules(RECORDING_YAML):
        assert re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z_0-9]+", rule["record"]), rule["record"]


def test_yaml_thresholds_equal_the_python_constants() -> None:
    assert _alert("GpuMemoryAlmostFull")["expr"].endswith(f"> {num(thresholds.MEMORY_USED_RATIO)}")
    assert _alert("GpuMemoryAlmostFull")["for"] == thresholds.MEMORY_USED_FOR
    high, crit = _alert("GpuTemperatureHigh"), _alert("GpuTemperatureCritical")
    assert high["expr"].endswith(f"> {num(thresholds.TEMPERATURE_WARNING_CELSIUS)}")
    assert crit["expr"].endswith(f"> {num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)}")
    assert (high["for"], crit["for"]) == (thresholds.TEMPERATURE_WARNING_FOR,
                                          thresholds.TEMPERATURE_CRITICAL_FOR)
    forecast = _alert("GpuMemoryExhaustionForecast")["expr"]
    assert alerts.MEMORY_FORECAST in forecast
    memory_records = {r.record: r.expr for r in alerts.all_records()}
    window = f"[{thresholds.LEAK_WINDOW}], {thresholds.LEAK_HORIZON_SECONDS})"
    assert window in memory_records[alerts.MEMORY_FORECAST]
    assert f"> {num(thresholds.LEAK_MIN_GROWTH_RATIO)} *" in forecast
    assert f"< {num(thresholds.IDLE_UTILIZATION_RATIO)}" in _alert("GpuMemoryHeldIdle")["expr"]
    assert _alert("GpuMemoryHeldIdle")["for"] == thresholds.IDLE_FOR
    # The per-process floor and ratio are applied by the exporter (gpu_user_idle_memory_bytes).
    assert f"< {num(thresholds.IDLE_UTILIZATION_RATIO)}" in _alert("GpuUserMemoryIdle")["expr"]
    assert f"> {num(thresholds.DATA_STALE_SECONDS)}" in _alert("GpuExporterDataStale")["expr"]
    assert thresholds.EXPORTER_JOB_REGEX in _alert("GpuExporterDown")["expr"]


def test_every_owner_alert_is_shown_to_name_its_owner() -> None:
    """The label set an owner alert's expression produces, as promtool evaluates it: at least
    one firing unit test has a non-empty owner label (user, namespace or Slurm job)."""
    named: set[str] = set()
    for case in _unit_tests():
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                labels = alert["exp_labels"]
                if any(labels.get(label) for label in owners.OWNER_LABELS):
                    named.add(check["alertname"])
    owner_alerts = {a.alert for a in alerts.all_alerts() if a.audience == "owner"}
    assert owner_alerts, "no owner alerts"
    assert owner_alerts - named == set(), "owner alerts never shown to name their owner"


def test_owner_alerts_tell_how_to_act_and_operator_alerts_do_not_escalate() -> None:
    for rule in alerts.all_alerts():
        notes = dict(rule.details)
        if rule.audience == "owner":
            assert "processes" in notes, rule.alert
            assert "escalation" in notes, rule.alert
        else:
            assert "escalation" not in notes, rule.alert
    # Every owner alert is escalated after its own ``for`` plus the escalation time.
    expr = _alert(escalation.ALERT)["expr"]
    after = seconds(thresholds.OWNER_ESCALATE_AFTER)
    for rule in escalation.owner_alerts(alerts.groups()):
        hold = seconds(rule.for_) if rule.for_ else 0
        line = next(line for line in expr.splitlines() if "ALERTS_FOR_STATE" in line
                    and f'alertname="{rule.alert}"' in line)
        threshold = line.rstrip(",").rpartition("> ")[2]
        assert sum(int(term) for term in threshold.split(" + ")) == hold + after, (rule.alert,
                                                                                 line)
    assert "for" not in _alert(escalation.ALERT)  # never pending: no annotations until due


def test_an_alert_without_audience_is_rejected() -> None:
    rule = _alert("GpuProcessIdle")
    anchors = {r.alert.lower() for r in alerts.all_alerts()}
    _check_alert(rule, anchors)
    del rule["labels"]["audience"]
    with pytest.raises(AssertionError, match="no audience"):
        _check_alert(rule, anchors)
