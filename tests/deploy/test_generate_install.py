"""The generator runs from an install: the wheel holds the ``dashboards`` package and its
``generate`` extra, and ``pip install 'gpu-exporter[generate]'`` in a fresh virtual
environment gives a ``gpu-exporter-generate`` that builds a site's files, the same as the
repository's generator does."""

from __future__ import annotations

import email
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from dashboards import generate, settings
from exporter import __version__

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ROOT = generate.REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = out.glob("gpu_exporter-*.whl")
    return built


def test_the_wheel_declares_the_generate_extra_and_its_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"gpu_exporter-{__version__}.dist-info"
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert "generate" in metadata.get_all("Provides-Extra", [])
    requires = metadata.get_all("Requires-Dist", [])
    assert any(r.startswith("grafana-foundation-sdk") and 'extra == "generate"' in r
               for r in requires), requires
    assert "gpu-exporter-generate = dashboards.entry:main" in entry_points
    for module in ("generate", "settings", "cost", "alerts", "efficiency", "entry"):
        assert f"dashboards/{module}.py" in names
    assert "dashboards/settings.example.yaml" in names
    # The repository's generated output stays out of the wheel.
    assert not any(n.startswith(("dashboards/grafana/", "dashboards/rules/")) for n in names)


def test_a_fresh_install_with_the_extra_builds_a_site(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         f"{wheel}[generate]"], capture_output=True, text=True, timeout=200, check=False)
    assert install.returncode == 0, install.stderr[-3000:]
    example = subprocess.run(
        [str(python), "-c", "import dashboards, pathlib; print(pathlib.Path(dashboards.__file__)"
         ".parent / 'settings.example.yaml')"], capture_output=True, text=True, check=True,
        timeout=60, cwd=tmp_path).stdout.strip()
    site = tmp_path / "site"
    result = subprocess.run([str(env_dir / "bin" / "gpu-exporter-generate"), "--config",
                             example, "--output", str(site)],
                            capture_output=True, text=True, timeout=120, check=False,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    wanted = generate.site_outputs(settings.load(Path(example)))
    written = {p.relative_to(site).as_posix(): p.read_text(encoding="utf-8")
               for p in site.rglob("*") if p.is_file()}
    assert written == wanted
    assert f"rules/{generate.COST_FILE}" in written
