"""docs/scale.md's configurations to copy are the ones ``bench/fleet_two_tier.py`` runs, and
Prometheus' and vmalert's own checkers accept them with the repo's rule files."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.fleet import RULES_DIR
from bench.fleet_two_tier import (
    VMALERT,
    agent_config,
    central_prometheus_config,
    vmalert_args,
)
from tests.dashboards.promtool import require_promtool

ROOT = Path(__file__).resolve().parents[2]

SCALE_DOC = ROOT / "docs" / "scale.md"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
#: The host names the documented examples use in place of the bench's 127.0.0.1 ports.
TARGETS = ["gpu-node-001:9477", "gpu-node-002:9477"]
PROMETHEUS_URL = "http://prometheus-central:9090"
VICTORIA_URL = "http://victoriametrics:8428"
ALERTMANAGER_URL = "http://alertmanager:9093"


def _block(after: str, fence: str) -> str:
    """The first fenced block opened with ``fence`` after the text ``after`` in the doc."""
    text = SCALE_DOC.read_text(encoding="utf-8")
    start = text.index(fence + "\n", text.index(after)) + len(fence) + 1
    return text[start:text.index("```", start)]


def _rules_in(folder: str) -> list[Path]:
    return [Path(folder) / path.name for path in RULE_FILES]


def _dump(tmp_path: Path, name: str, config: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_the_documented_agent_config_is_the_benchmarks() -> None:
    documented = yaml.safe_load(_block("An agent per rack", "```yaml"))
    assert documented == agent_config(
        TARGETS, [f"{PROMETHEUS_URL}/api/v1/write", f"{VICTORIA_URL}/api/v1/write"], 15.0)


def test_the_documented_central_prometheus_config_is_the_benchmarks() -> None:
    documented = yaml.safe_load(_block("The central Prometheus (`prometheus", "```yaml"))
    assert documented == central_prometheus_config(_rules_in("/etc/prometheus/rules"), 15.0)


def test_the_documented_vmalert_command_is_the_benchmarks() -> None:
    lines = _block("VictoriaMetrics and vmalert", "```").splitlines()
    command = shlex.split(next(line for line in lines if line.startswith("vmalert ")))
    assert command[1:] == vmalert_args(_rules_in("/etc/vmalert"), VICTORIA_URL, ALERTMANAGER_URL,
                                       15.0)


def test_promtool_accepts_the_agent_and_central_configs(tmp_path: Path) -> None:
    agent = _dump(tmp_path, "agent.yml", agent_config(TARGETS, [f"{PROMETHEUS_URL}/api/v1/write"],
                                                      15.0))
    central = _dump(tmp_path, "prometheus.yml", central_prometheus_config(RULE_FILES, 15.0))
    tool = require_promtool()
    for argv in ([tool, "check", "config", "--agent", str(agent)],
                 [tool, "check", "config", str(central)]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not VMALERT.exists(),
                    reason="needs Debian's victoria-metrics package (scripts/test installs it)")
def test_vmalert_accepts_every_rule_file() -> None:
    # -dryRun parses every expression with MetricsQL and every annotation template.
    result = subprocess.run(
        [str(VMALERT), "-dryRun", "-loggerLevel=ERROR",
         *vmalert_args(RULE_FILES, VICTORIA_URL, ALERTMANAGER_URL, 15.0)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
