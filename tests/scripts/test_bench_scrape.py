"""bench/bench_scrape.py: series counts and ``--compare REV --after REV2`` on real servers,
which keep the inherited PYTHONPATH (``tests/e2e/server.py``'s ``ExporterProcess``)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_scrape import count_series
from tests.e2e.server import ExporterProcess

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_scrape.py"

pytestmark = [pytest.mark.timeout(300)]

BODY = (b'# HELP gpu_up Whether the GPU answered.\n# TYPE gpu_up gauge\n'
        b'gpu_up{gpu="0"} 1.0\ngpu_up{gpu="1"} 0.0\n\n# EOF\n')


def test_count_series_counts_sample_lines_of_plain_and_gzip_bodies() -> None:
    assert count_series(BODY, gzipped=False) == 2
    assert count_series(gzip.compress(BODY), gzipped=True) == 2


def test_servers_keep_the_inherited_python_path(tmp_path: Path) -> None:
    # The GPU machine's FastAPI/uvicorn wheels are on PYTHONPATH: the exporter a benchmark
    # starts must see them after its own checkout (it did not: bench_scrape --nvml failed).
    wheels = str(tmp_path / "wheels")
    with ExporterProcess("--source", "simulated", "--scenario", "synthetic:1x1",
                         env={"PYTHONPATH": wheels}) as server:
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert f"PYTHONPATH={ROOT}{os.pathsep}{wheels}".encode() in environ


def test_after_needs_compare() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--after", "HEAD"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "--after needs --compare" in result.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
def test_compare_two_revisions_runs_both_as_after_and_before() -> None:
    # The same revision on both sides: equal series counts, and the after side is named by
    # its revision (not "this checkout"), so --after really picked the tree.
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--compare", head, "--after", head, "--scrapes", "20"],
        capture_output=True, text=True, timeout=280, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {match.group(1): match for match in re.finditer(
        r"^(shared|fresh): server p50 before [0-9.]+ ms \((\S+)\), after [0-9.]+ ms \((\S+)\): "
        r"ratio [0-9.]+ .*series (\d+) -> (\d+), p50 per series [0-9.]+$",
        result.stdout, re.MULTILINE)}
    assert set(lines) == {"shared", "fresh"}, result.stdout
    for match in lines.values():
        assert match.group(2) == match.group(3) == head
        assert int(match.group(4)) == int(match.group(5)) > 100
