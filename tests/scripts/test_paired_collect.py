"""bench/paired_collect.py: two trees in one process, each timed with its own code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "paired_collect.py"

pytestmark = [pytest.mark.timeout(120)]


def test_each_tree_is_timed_with_its_own_code(tmp_path: Path) -> None:
    # A copy of this tree whose collection sleeps 2 ms: if both sources ran one tree's modules,
    # the two p50s would match.
    slow = tmp_path / "slow"
    shutil.copytree(ROOT / "exporter", slow / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    source = slow / "exporter" / "sources" / "nvml" / "source.py"
    text = source.read_text()
    marker = "        calls = self._calls\n"
    assert marker in text
    source.write_text(text.replace(marker, "        time.sleep(0.002)\n" + marker, 1))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(slow), "--memoised-fake", "--blocks", "4",
         "--collections", "5"],
        capture_output=True, text=True, timeout=100, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["p50_us"]["baseline"] > 2000 > found["p50_us"]["this"]
    assert 0 < found["ratio_p50"] < 0.5
    assert len(found["ratio_quartiles"]) == 3


def test_too_few_blocks_is_an_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), str(ROOT), "--blocks", "1"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "--blocks must be at least 2" in result.stderr
