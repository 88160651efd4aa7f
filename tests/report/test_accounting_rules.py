"""The idle-accounting recording rules: promtool-clean, unit-tested at the edges, named once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from dashboards import accounting, rules
from exporter.catalogue import metrics, records
from exporter.catalogue.workloads import SLURM
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


def test_a_wrong_level_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-pod records that kept host processes' rows (no pod matcher): promtool must fail."""
    monkeypatch.setattr(records, "POD", records.Level("instance_namespace_pod", ("user",)))
    monkeypatch.setattr(records, "LEVELS", (records.USER, records.POD, records.JOB))
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


def test_rules_read_only_the_accounting_counters() -> None:
    """Each rule reads one exporter counter per user, pod or job: never a process series."""
    read = {name for rule in accounting.all_records()
            for name in re.findall(r"[a-z_]+(?=[{\[])", rule.expr)}
    assert read == {row.name for row in metrics.ACCOUNTING_ROWS}


def test_job_label_is_the_exporters_slurm_label() -> None:
    """The per-job records aggregate the label the exporter really puts on process series."""
    assert SLURM.group_by == (records.JOB_LABEL,)
    assert records.JOB_LABEL in SLURM.labels
