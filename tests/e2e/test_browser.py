"""The landing page in Debian's headless Chromium: the DOM has the GPU table, a PNG renders."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.server import ExporterProcess

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Appended to the served page (saved as a file: the server's CSP forbids scripts): how many
#: line boxes each GPU's UUID takes, and the process table's header, as the browser laid them out.
MEASURE = """<script>
const uuids = [...document.querySelectorAll("#gpus .uuid")].map(e => e.getClientRects().length);
const header = [...document.querySelectorAll("#processes thead th")].map(e => e.textContent);
document.body.setAttribute("data-measured", JSON.stringify({uuids, header}));
</script>"""
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=90, check=False,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/test installs it)")
def test_landing_page_renders_in_chromium(tmp_path: Path) -> None:
    with ExporterProcess("--source", "simulated", "--scenario", "shared-workstation") as server:
        dom = _chromium(tmp_path, "--dump-dom", server.url("/"))
        with urllib.request.urlopen(server.url("/"), timeout=10) as response:
            served = response.read().decode()
        shot = tmp_path / "landing.png"
        picture = _chromium(tmp_path, "--window-size=1280,900", f"--screenshot={shot}",
                            server.url("/"))
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert '<table id="gpus">' in html
    gpu_table = html[html.index('<table id="gpus">'):]
    gpu_table = gpu_table[: gpu_table.index("</table>")]
    assert gpu_table.count("<tr>") == 4  # header + the preset's 3 GPUs
    assert "NVIDIA RTX A6000" in gpu_table
    assert "jupyter-kernel" in html  # alice's forgotten kernel is in the top processes
    assert picture.returncode == 0, picture.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000  # a rendered page, not a blank image

    # Laid out at a laptop's width: every UUID on one line, and no Pod column on a workstation
    # (no process is in a pod).
    page = tmp_path / "measure.html"
    page.write_text(served.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    measured = _chromium(tmp_path, "--window-size=1280,900", "--dump-dom", page.as_uri())
    assert measured.returncode == 0, measured.stderr[-2000:]
    marker = 'data-measured="'
    raw = measured.stdout[measured.stdout.index(marker) + len(marker):]
    result = json.loads(raw[:raw.index('"')].replace("&quot;", '"'))
    assert result["uuids"] == [1, 1, 1], result
    assert result["header"] == ["GPU", "PID", "User", "Process", "Memory", "SM utilisation",
                                "Idle for"]
