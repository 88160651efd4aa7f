"""Run promtool on the generated rule files; shared by the rule tests.

``promtool test rules`` compares annotations exactly, so the behaviour tests load the generated
copy of the alerts without annotations (``dashboards/rules/tests/rules/``);
``annotations.test.yaml`` runs against the real file. Both run as-is from the repository root:
``promtool test rules dashboards/rules/tests/*.yaml``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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


def test_files() -> list[str]:
    """The rule test files as a user passes them: ``dashboards/rules/tests/*.yaml``."""
    return sorted(str(p.relative_to(ROOT)) for p in TESTS_DIR.glob("*.yaml"))


def stage_tests(tmp: Path, alerts_without_annotations: str) -> list[Path]:
    """A copy of the rule tests whose behaviour tests load ``alerts_without_annotations``."""
    tests = Path(shutil.copytree(TESTS_DIR, tmp / "tests"))
    (tests / "rules" / "gpu-exporter-alerts.yaml").write_text(alerts_without_annotations)
    return sorted(tests.glob("*.yaml"))
