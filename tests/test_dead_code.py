"""No dead code: vulture at 80 % confidence finds nothing in the package, the dashboards'
generator, the benchmarks, the GPU scripts or the tests (a name that must stay although nothing
calls it, such as a signal handler's frame argument, starts with ``_``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("exporter", "gpu_exporter_torch", "dashboards", "bench", "scripts", "tests")


def test_vulture_finds_no_dead_code() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "vulture", *TREES, "--min-confidence", "80",
         "--exclude", "exporter/attribution/podresources/v1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert found.returncode == 0, found.stdout + found.stderr


def test_vulture_reports_an_unused_import(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text("import os\n")
    found = subprocess.run([sys.executable, "-m", "vulture", str(tmp_path),
                            "--min-confidence", "80"], capture_output=True, text=True,
                           timeout=60, check=False)
    assert found.returncode != 0
    assert "unused import 'os'" in found.stdout
