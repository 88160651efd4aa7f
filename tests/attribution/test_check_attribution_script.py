"""The GPU machine's attribution check (scripts/gpu/check_attribution.py) run with ``--fake``:
real cgroups created as root, real processes moved in, a fake NVML listing them, the fake
kubelet, and the real exporter. Skipped where cgroups cannot be created (not root, no
writable cgroup v2 hierarchy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu" / "check_attribution.py"


def _cgroup_v2_writable() -> bool:
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            probe = root / f"gpu-exporter-probe-{os.getpid()}"
            try:
                probe.mkdir()
                probe.rmdir()
                return True
            except OSError:
                return False
    return False


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not _cgroup_v2_writable(),
                       reason="needs root and a writable cgroup v2 hierarchy"),
]


def test_fake_run_passes_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--fake", "--port", str(free_port()), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    names = {name for name, ok, _ in results if ok}
    assert {"kernel cgroup of the slurm process parses", "exporter labels of the docker process",
            "allocation series for the GPU's UUID", "created cgroups removed"} <= names
    assert all(ok for _, ok, _ in results)
