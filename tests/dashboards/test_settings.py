"""A site's settings: the file's errors, every setting reaching the rules, no default left
behind, the generator's --config/--output, and the cost rules' known amounts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import cost, generate, rules, settings
from exporter.catalogue import settings as catalogue
from exporter.catalogue.settings import SETTINGS, Kind, Settings, SettingsError, parse
from tests.dashboards import promtool

ROOT = generate.REPO
EXAMPLE = ROOT / generate.SETTINGS_EXAMPLE


def _changed(value: float | str, kind: Kind) -> float | str:
    """A valid value unlike ``value`` and unlike every default (so it is recognisable)."""
    changes: dict[Kind, float | str] = {
        Kind.RATIO: 0.37, Kind.CELSIUS: 71.5, Kind.BYTES: 3 * 2**30 // 2, Kind.SECONDS: 47.0,
        Kind.COUNT: 17.0, Kind.DURATION: "43m", Kind.REGEX: "site-gpu-[a-z]+"}
    changed = changes[kind]
    assert changed != value
    return changed


#: Every setting changed at once (as a settings document).
EVERYTHING: dict[str, Any] = {
    section: {s.key: _changed(s.default, s.kind) for s in SETTINGS if s.section == section}
    for section in catalogue.SECTIONS}


def _rule_texts(site: Settings) -> str:
    out = generate.site_outputs(site)
    return "".join(text for name, text in sorted(out.items()) if name.startswith("rules/"))


@pytest.mark.parametrize(("doc", "message"), [
    ({"thresholds": {"memoryUsedRatio": 1.5}}, "thresholds.memoryUsedRatio: 1.5 is out of range"),
    ({"thresholds": {"memoryUsedRatio": "90%"}}, "thresholds.memoryUsedRatio: '90%' is not a "
     "number"),
    ({"thresholds": {"idleFor": "1h30m"}}, "thresholds.idleFor: '1h30m' is not a duration"),
    ({"thresholds": {"idleUserMemoryBytes": 1.5}}, "is not a whole number"),
    ({"thresholds": {"memoryUsed": 0.9}}, "thresholds.memoryUsed: unknown key"),
    ({"threshold": {}}, "threshold: unknown key"),
    ({"selectors": {"exporterJob": 'a"b'}}, "selectors.exporterJob"),
    ({"selectors": {"exporterJob": "(unclosed"}}, "is not a regular expression"),
    ({"cost": {"kwhPrice": 0.3}}, "cost.currency: '': prices need a currency"),
    ({"cost": {"currency": "EUR", "kwhPrice": -1}}, "cost.kwhPrice: -1 is negative"),
    ({"cost": {"currency": "EUR", "gpuHourPrices": [{"model": "H100"}]}},
     "cost.gpuHourPrices[0].price: None is not a number"),
    ({"cost": {"currency": "EUR", "gpuHourPrices": [{"model": "H100", "price": 1, "x": 2}]}},
     "cost.gpuHourPrices[0].x: unknown key"),
    ({"cost": {"teams": {"users": {"alice": ["a"]}}}}, "cost.teams.users.alice"),
    (["thresholds"], "the settings: must be a mapping"),
])
def test_a_wrong_settings_document_is_one_line_naming_the_key(doc: Any, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse(doc)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_defaults_prices_and_teams_parse() -> None:
    assert parse(None) == Settings()
    site = settings.load(EXAMPLE)
    assert site.prices is not None
    assert site.prices.currency == "EUR"
    assert site.prices.gpu_hour_price("NVIDIA H100 80GB HBM3") == 2.5
    assert site.prices.gpu_hour_price("Tesla T4") == 0.5
    assert site.teams.of(user="alice") == "vision"
    assert site.teams.of(user="alice", namespace="ml-prod") == "platform"
    assert site.teams.of(user="alice", account="physics") == "physics"
    # A currency alone prices nothing: no cost rules, never zero-valued ones.
    assert parse({"cost": {"currency": "EUR"}}).prices is None


def test_every_setting_reaches_the_rules() -> None:
    base = _rule_texts(Settings())
    for setting in SETTINGS:
        doc = {setting.section: {setting.key: _changed(setting.default, setting.kind)}}
        assert _rule_texts(parse(doc)) != base, f"{setting.key} changes no rule"


def test_a_site_generation_matches_one_where_the_values_came_before_any_import(
        tmp_path: Path) -> None:
    """The modules read the settings when they build, never at import: a generation in a
    fresh interpreter whose thresholds were set before any rule or dashboard module was
    imported gives the same files as ``--config``."""
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(EVERYTHING))
    site = settings.load(site_file)
    script = (
        "import json, sys\n"
        "from exporter.catalogue import settings as s, thresholds\n"
        f"site = s.parse(json.loads({json.dumps(json.dumps(EVERYTHING))!s}))\n"
        "for name, value in site.values.items():\n"
        "    setattr(thresholds, name, value)\n"
        "from dashboards import generate\n"
        "from exporter.catalogue.settings import Settings\n"
        "json.dump(generate.site_outputs(Settings()), sys.stdout)\n")
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=ROOT, timeout=120, check=True)
    assert json.loads(fresh.stdout) == generate.site_outputs(site)


def test_no_default_is_left_where_a_setting_stands() -> None:
    """With every setting changed, the rules hold none of the defaults' texts at the places
    the chart's placeholders mark (what a settings file changes, the chart changes too)."""
    with settings.placeholders():
        marked = generate.rule_files()
    changed = generate.site_outputs(parse(EVERYTHING))
    for name, text in marked.items():
        assert "⟦" in text or name != generate.ALERTS_FILE
        assert "⟦" not in changed[f"rules/{name}"]
    alerts = changed[f"rules/{generate.ALERTS_FILE}"]
    assert "> 0.37" in alerts
    assert "for: 43m" in alerts
    assert "(over 37% for 43m)" in alerts
    assert 'job=~"site-gpu-[a-z]+"' in alerts


def test_the_generator_writes_a_site_from_a_file(tmp_path: Path) -> None:
    output = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.generate", "--config", str(EXAMPLE), "--output",
         str(output)], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    names = sorted(p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file())
    assert names == sorted([*(f"rules/{n}" for n in (
        generate.ALERTS_FILE, generate.RECORDING_FILE, generate.ACCOUNTING_FILE,
        generate.COST_FILE)), *(f"grafana/{n}" for n in generate.DASHBOARDS)])
    alerts = (output / "rules" / generate.ALERTS_FILE).read_text()
    assert "for: 2h" in alerts
    assert "> 83\n" in alerts
    efficiency = json.loads((output / "grafana" / "gpu-efficiency.json").read_text())
    assert "suffix: EUR" in json.dumps(efficiency)
    check = promtool.run("check", "rules", "--lint=all", "--lint-fatal",
                         *sorted((output / "rules").glob("*.yaml")))
    assert check.returncode == 0, check.stdout + check.stderr
    # Without prices, no cost file at all (absent, never zero).
    plain = tmp_path / "plain.yaml"
    plain.write_text("thresholds: {idleFor: 3h}\n")
    assert generate.main(["--config", str(plain), "--output", str(tmp_path / "p")]) == 0
    assert not (tmp_path / "p" / "rules" / generate.COST_FILE).exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--config", "{bad}"], "--config and --output go together"),
    (["--config", "{bad}", "--output", "{out}"], "thresholds.idleFor: 'soon' is not a duration"),
    (["--config", "{missing}", "--output", "{out}"], "cannot read it"),
])
def test_generator_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       args: list[str], message: str) -> None:
    (tmp_path / "bad.yaml").write_text("thresholds: {idleFor: soon}\n")
    paths = {"bad": tmp_path / "bad.yaml", "missing": tmp_path / "nope.yaml",
             "out": tmp_path / "out"}
    try:
        code = generate.main([a.format(**paths) for a in args])
    except SystemExit as exc:  # argparse's own usage error
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1 or "usage:" in err


def test_cost_rules_give_the_known_amounts_and_a_price_change_is_caught(tmp_path: Path) -> None:
    """cost.test.yaml's amounts pass with the example's prices, and fail when one price
    moves a little."""
    tests = promtool.TESTS_DIR / "cost.test.yaml"
    result = promtool.run("test", "rules", tests)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["cost"]["gpuHourPrices"][0]["price"] = 2.6
    shifted = rules.render(cost.groups(parse(doc)), "cost.py")
    staged = promtool.stage_tests(tmp_path, (promtool.TESTS_DIR / "rules" /
                                             "gpu-exporter-alerts.yaml").read_text())
    (tmp_path / "tests" / "rules" / generate.COST_FILE).write_text(shifted)
    (tmp_path / "gpu-exporter-accounting.yaml").write_text(
        (promtool.RULES_DIR / generate.ACCOUNTING_FILE).read_text())
    cost_test = next(p for p in staged if p.name == "cost.test.yaml")
    result = promtool.run("test", "rules", cost_test)
    assert result.returncode != 0, result.stdout


def test_cost_rules_are_lint_clean_and_every_cost_record_is_tested() -> None:
    example = promtool.TESTS_DIR / "rules" / generate.COST_FILE
    check = promtool.run("check", "rules", "--lint=all", "--lint-fatal", example)
    assert check.returncode == 0, check.stdout + check.stderr
    text = (promtool.TESTS_DIR / "cost.test.yaml").read_text()
    records = {rule.record for rule in cost.chart_group().rules}
    untested = {r for r in records if r not in text}
    # The team's GPU records feed its costs, which are tested; its used cost is as the others.
    assert untested <= {"instance_team:gpu_held_gpus:sum1m", "instance_team:gpu_used_gpus:sum1m",
                        "instance_team:gpu_idle_gpus:sum1m", "instance_team:gpu_power_watts:sum1m",
                        "instance_namespace_pod:gpu_used_cost_per_second:sum1m",
                        "instance_namespace_pod:gpu_idle_cost_per_second:sum1m",
                        "instance_job:gpu_used_cost_per_second:sum1m",
                        "instance_team:gpu_used_cost_per_second:sum1m"}, untested
