"""One version everywhere, a Keep a Changelog CHANGELOG.md, and scripts/release cutting the
chart, the wheel and the notes on a copy of the repository (the image stage is
tests/deploy/test_image_run.py, which the release runs with the variables checked here)."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import helm_python
import pytest
import yaml

from exporter import __version__
from tests.deploy import image

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "release.py"
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["release"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


release = _load()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the working tree as git sees it (tracked and not ignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    copy = tmp_path / "repo"
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes((ROOT / name).read_bytes())
    return copy


def test_package_chart_image_and_cli_share_one_version() -> None:
    assert release.current_version(ROOT) == __version__
    chart = yaml.safe_load((ROOT / "helm" / "gpu-exporter" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    cli = subprocess.run([sys.executable, "-m", "exporter", "--version"], capture_output=True,
                         text=True, timeout=60, check=True)
    assert cli.stdout.strip() == f"gpu-exporter {__version__}"
    # Every alert links to the runbook of this version's tag, in the rules and the chart's copy.
    for rules in (ROOT / "dashboards/rules/gpu-exporter-alerts.yaml",
                  ROOT / "helm/gpu-exporter/files/rules/gpu-exporter-alerts.yaml"):
        urls = [rule["annotations"]["runbook_url"]
                for group in yaml.safe_load(rules.read_text())["groups"]
                for rule in group["rules"] if "alert" in rule]
        assert urls
        assert all(f"/blob/v{__version__}/dashboards/runbooks/" in url for url in urls), rules
    # The release hands the image tests their base and export target by these names.
    assert (release.BASE_ENV, release.EXPORT_ENV, release.NAME_ENV) == (
        image.BASE_ENV, image.EXPORT_ENV, image.NAME_ENV)


def test_a_place_that_disagrees_is_named(checkout: Path) -> None:
    chart = checkout / "helm" / "gpu-exporter" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f"version: {__version__}", "version: 9.9.9"))
    with pytest.raises(release.ReleaseError, match=r"Chart.yaml: the chart's version: 9\.9\.9"):
        release.current_version(checkout)


def test_changelog_follows_keep_a_changelog_and_has_this_version() -> None:
    assert release.changelog_problems(CHANGELOG, __version__) == []
    (section,) = [s for s in release.sections(CHANGELOG) if s.version == __version__]
    assert section.kinds[0] in ("Breaking changes", "Upgrade notes")
    # The check can fail: each of these breaks one rule.
    swapped = CHANGELOG.replace("### Added", "### Tmp").replace(
        "### Changed", "### Added").replace("### Tmp", "### Changed")
    for broken, problem in (
        (CHANGELOG.replace(f"## [{__version__}]", "## [0.0.9]"), "no section for the current"),
        (swapped, "out of order"),
        (CHANGELOG.replace("### Fixed", "### Bugs"), "unknown subsections"),
        (CHANGELOG.replace("## [Unreleased]\n", ""), "first section must be"),
        (CHANGELOG.replace(f"## [{__version__}] - ", f"## [{__version__}] "), "is not"),
        (CHANGELOG.replace(f"[{__version__}]: ", "[x]: "), "no link reference"),
    ):
        assert any(problem in p for p in release.changelog_problems(broken, __version__)), problem


def test_cut_writes_notes_chart_and_wheel_that_load_back(checkout: Path) -> None:
    out = checkout / "dist"
    result = subprocess.run(
        [sys.executable, str(checkout / "scripts" / "release.py"), "--root", str(checkout),
         "--out", str(out), "--skip-image", "--repository", "registry.example.com/ml/gpu-exporter",
         "--date", "2030-01-02"], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "NOT A RELEASE: the image was skipped" in result.stdout
    assert "helm push" in result.stdout
    assert "oci://registry.example.com/ml/charts" in result.stdout
    # The notes are the version's CHANGELOG section, now dated.
    changelog = (checkout / "CHANGELOG.md").read_text()
    if f"## [{__version__}] - unreleased" in CHANGELOG:
        assert f"## [{__version__}] - 2030-01-02" in changelog
    else:
        assert changelog == CHANGELOG
    notes = (out / f"RELEASE-NOTES-{__version__}.md").read_text()
    (section,) = [s for s in release.sections(changelog) if s.version == __version__]
    assert notes.startswith(f"# gpu-exporter {__version__} (")
    assert notes.endswith(section.body)
    # The chart archive is what Helm's engine loads and installs.
    chart = helm_python.Chart.load_archive((out / f"gpu-exporter-{__version__}.tgz").read_bytes())
    assert (chart.name, chart.version) == ("gpu-exporter", __version__)
    rendered = chart.render({}, name="gpu", namespace="monitoring", is_install=True)
    (daemonset,) = [d for d in yaml.safe_load_all(rendered["gpu-exporter/templates/daemonset.yaml"])
                    if d]
    image = daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{release.DEFAULT_REPOSITORY}:{__version__}"
    assert {f["name"] for f in chart.files} >= {"files/rules/gpu-exporter-alerts.yaml"}
    # The wheel carries the same version, and both packages.
    wheel = out / f"gpu_exporter-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert f'__version__ = "{__version__}"' in archive.read("exporter/__init__.py").decode()
    assert "gpu_exporter_torch/__init__.py" in names
    sums = dict(reversed(line.split("  ")) for line in (out / "SHA256SUMS").read_text().split(
        "\n") if line)
    assert set(sums) == {wheel.name, f"gpu-exporter-{__version__}.tgz",
                         f"RELEASE-NOTES-{__version__}.md"}
    for name, digest in sums.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest


def test_bump_writes_the_new_version_everywhere(checkout: Path) -> None:
    changelog_file = checkout / "CHANGELOG.md"
    released = release.date_section(CHANGELOG, __version__, "2030-01-02")
    changelog_file.write_text(released.replace(
        "## [Unreleased]\n", "## [Unreleased]\n\n### Fixed\n\n- Something.\n", 1))
    release.bump(checkout, "0.2.0")
    assert release.current_version(checkout) == "0.2.0"
    changelog = changelog_file.read_text()
    # The Unreleased entries open the new section; the released one stays as it was.
    assert "## [Unreleased]\n\n## [0.2.0] - unreleased\n\n### Fixed\n\n- Something.\n" in (
        changelog)
    assert f"## [{__version__}] - 2030-01-02" in changelog
    assert release.changelog_problems(changelog, "0.2.0") == []
    assert f"compare/v{__version__}...HEAD" in changelog
    rules = (checkout / "dashboards/rules/gpu-exporter-alerts.yaml").read_text()
    assert "/blob/v0.2.0/" in rules
    assert f"/blob/v{__version__}/" not in rules
    with pytest.raises(release.ReleaseError, match="already has a section"):
        release.bump(checkout, "0.2.0")
    # While the newest version is not cut, a bump renames it (the planned number changed).
    release.bump(checkout, "1.0.0")
    changelog = changelog_file.read_text()
    assert "## [1.0.0] - unreleased\n\n### Fixed" in changelog
    assert "[0.2.0]" not in changelog
    assert release.changelog_problems(changelog, "1.0.0") == []
