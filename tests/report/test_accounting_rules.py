"""The idle-accounting recording rules: promtool-clean, unit-tested at the edges, named once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from dashboards import accounting, rules
from exporter import thresholds
from exporter.metrics import SLURM_LABELS
from exporter.report import records
from tests.dashboards import promtool
from tests.dashboards.promtool import RULES_DIR, TESTS_DIR

RULE_FILE = RULES_DIR / records.RULE_FILE
TEST_FILE = TESTS_DIR / "accounting.test.yaml"


def test_promtool_lint_is_clean() -> None:
    result = promtool.run("check", "rules", "--lint=all", "--lint-fatal", RULE_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(records.all_records())} rules found" in result.stdout


def test_promtool_unit_tests_pass_as_documented() -> None:
    """``promtool test rules dashboards/rules/tests/accounting.test.yaml``, as a user runs it."""
    result = promtool.run("test", "rules", TEST_FILE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("value", [0.04, 0.81])
def test_a_shifted_idle_threshold_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: float
) -> None:
    """0.04 makes the 4 % process busy; 0.81 makes bob's 80 % job idle: promtool must fail."""
    monkeypatch.setattr(accounting, "_IDLE", repr(value))
    (tmp_path / "tests").mkdir()
    (tmp_path / records.RULE_FILE).write_text(rules.render(accounting.groups(), "accounting.py"))
    staged = Path(shutil.copy(TEST_FILE, tmp_path / "tests" / TEST_FILE.name))
    result = promtool.run("test", "rules", staged)
    assert result.returncode != 0, result.stdout


def test_every_record_is_unit_tested_and_named_in_records() -> None:
    doc = yaml.safe_load(RULE_FILE.read_text())
    (group,) = doc["groups"]
    assert group["name"] == records.GROUP
    assert group["interval"] == records.INTERVAL
    names = [rule["record"] for rule in group["rules"]]
    assert tuple(names) == records.all_records()
    tested = " ".join(
        check["expr"] for case in yaml.safe_load(TEST_FILE.read_text())["tests"]
        for check in case["promql_expr_test"]
    )
    assert [n for n in names if n not in tested] == []
    for name in names:
        assert re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z_0-9]+", name), name


def test_idle_threshold_comes_from_the_thresholds_module() -> None:
    assert f"< {thresholds.IDLE_UTILIZATION_RATIO}" in RULE_FILE.read_text()


def test_job_label_is_the_exporters_slurm_label() -> None:
    """The per-job records aggregate the label the exporter really puts on process series."""
    assert SLURM_LABELS[0] == records.JOB_LABEL
