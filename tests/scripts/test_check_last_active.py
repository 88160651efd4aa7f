"""scripts/gpu/check_last_active.py against fake pynvml and torch (tests/scripts/fakes/).

The real run is on an H200 (docs/gpu-verification.md); here the script's own logic is
checked: it passes when NVML behaves as documented, and fails when the samples lie.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu" / "check_last_active.py"
FAKES = Path(__file__).resolve().parent / "fakes"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def run(tmp_path: Path, **env: str) -> tuple[int, str, dict[str, object]]:
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-exporter", "--idle-seconds", "7"],
        env={**os.environ, "PYTHONPATH": f"{FAKES}{os.pathsep}{ROOT}",
             "FAKE_GPU_LOG": str(tmp_path / "gpu.log"), "OUT": str(out), **env},
        capture_output=True, text=True, timeout=80, check=False, cwd=ROOT,
    )
    summary = json.loads((out / "last_active.json").read_text())
    return result.returncode, result.stdout + result.stderr, summary


def test_passes_and_measures_the_buffer_with_a_well_behaved_nvml(tmp_path: Path) -> None:
    code, output, summary = run(tmp_path, FAKE_NVML_BUFFER_S="4")
    assert code == 0, output
    assert "[PASS] idle process keeps its last-active time" in output
    restarts = summary["restarts"]
    assert isinstance(restarts, list)
    # The fake buffer forgets after 4 s: early restarts recover, later ones find nothing.
    assert restarts[0]["recovered"] is not None, restarts
    assert restarts[-1]["recovered"] is None, restarts


def test_fails_when_nvml_keeps_reporting_the_idle_process(tmp_path: Path) -> None:
    """Samples that keep stamping the sleeping process busy must be caught."""
    code, output, _ = run(tmp_path, FAKE_TORCH_ALWAYS_BUSY="1")
    assert code == 1, output
    assert "[FAIL] burst process last active = its last kernel" in output
