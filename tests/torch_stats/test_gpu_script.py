"""``scripts/gpu/check_torch_publisher.py --fake``: the GPU proof's own checks, run on the fake
torch and a fake NVML, so the script is known to work before it takes GPU time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_script_passes_on_fakes(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "scripts/gpu/check_torch_publisher.py", "--fake", "--port",
         str(free_port()), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")]
    passed = [line for line in lines if line.startswith("PASS")]
    # A and B: every allocator series equals torch's own figure; the OOM; C untouched.
    for needle in ("A (pid", "B (pid", "gpu_process_torch_ooms_total = 1",
                   "C (no publisher)", "B's series vanish"):
        assert any(needle in line for line in passed), needle
    if os.geteuid() == 0:  # the second user (nobody) and the forged file need root
        assert any("forged" in line for line in passed)
    assert out.exists()
