"""Run promtool on the generated rule files; shared by the rule tests.

``promtool test rules`` compares annotations exactly, so behaviour tests run against a copy of
the rules with annotations removed (laid out like ``dashboards/rules/``, so the tests' relative
``rule_files`` resolve to the copy); ``annotations.test.yaml`` runs against the real files.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "dashboards" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
TESTS_DIR = RULES_DIR / "tests"
ANNOTATIONS_TEST = "annotations.test.yaml"
PROMTOOL = shutil.which("promtool")


def require_promtool() -> str:
    """The promtool path; skips when absent (scripts/test installs it, so CI always has it)."""
    if PROMTOOL is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return PROMTOOL


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool with ``args``, bounded in time."""
    return subprocess.run(
        [require_promtool(), *map(str, args)],
        capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
    )


def strip_annotations(text: str) -> str:
    """A rule file's text with every rule's annotations removed."""
    doc: dict[str, Any] = yaml.safe_load(text)
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return yaml.safe_dump(doc, sort_keys=False)


def stage_behaviour_tests(tmp: Path) -> list[Path]:
    """Copy the rule tests under ``tmp`` next to annotation-free rules; returns the test files."""
    rules, tests = tmp / "rules", tmp / "rules" / "tests"
    tests.mkdir(parents=True)
    for rule_file in RULE_FILES:
        (rules / rule_file.name).write_text(strip_annotations(rule_file.read_text()))
    staged = []
    for test_file in sorted(TESTS_DIR.glob("*.test.yaml")):
        if test_file.name != ANNOTATIONS_TEST:
            staged.append(Path(shutil.copy(test_file, tests / test_file.name)))
    return staged
