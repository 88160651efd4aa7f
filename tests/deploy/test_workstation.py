"""The workstation install without Docker (docs/workstation.md): systemd's own tools check the
units, the user and the directory they need; promtool checks the Prometheus files with the
rules they load."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exporter.config import FLAGS, unknown_env
from tests.report.backfill import PROMTOOL

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "systemd"
UNITS = ("gpu-exporter.service", "gpu-exporter-report.service", "gpu-exporter-report.timer")
#: Where the units expect the install (docs/workstation.md); the tests point them at a copy.
PREFIXES = {"/opt/gpu-exporter/": "opt/gpu-exporter/", "/usr/local/bin/": "usr/local/bin/"}
ANALYZE = shutil.which("systemd-analyze")
RULES = sorted((ROOT / "dashboards" / "rules").glob("*.yaml"))


def _settings(unit: str) -> dict[str, list[str]]:
    """Key -> values (a key may repeat) of a unit file."""
    found: dict[str, list[str]] = {}
    for line in (SYSTEMD / unit).read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def _installed(tmp_path: Path) -> Path:
    """The units in ``tmp_path`` with the install prefixes moved under it, where the programs
    they start exist: the exporter of this checkout and the mail script."""
    for prefix in PREFIXES.values():
        (tmp_path / prefix).mkdir(parents=True, exist_ok=True)
    (tmp_path / "opt/gpu-exporter/bin").mkdir()
    (tmp_path / "opt/gpu-exporter/bin/gpu-exporter").symlink_to(
        Path(sys.executable).parent / "gpu-exporter")
    shutil.copy(SYSTEMD / "gpu-exporter-mail-report.py",
                tmp_path / "usr/local/bin/gpu-exporter-mail-report")
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text(encoding="utf-8")
        for prefix, moved in PREFIXES.items():
            text = text.replace(prefix, f"{tmp_path}/{moved}")
        (tmp_path / unit).write_text(text, encoding="utf-8")
    return tmp_path


def _verify(directory: Path, *units: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, "verify", "--man=no", *(f"./{u}" for u in units)],
                          cwd=directory, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.fixture
def analyze(tmp_path: Path) -> Path:
    """A directory of installed units, once systemd-analyze is known to work here."""
    if ANALYZE is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "probe.service").write_text("[Service]\nExecStart=/bin/true\n")
    result = _verify(probe, "probe.service")
    if result.returncode != 0 or result.stderr.strip():
        pytest.skip(f"systemd-analyze verify cannot run here: {result.stderr.strip()[-300:]}")
    return _installed(tmp_path / "root")


def test_units_pass_systemd_analyze_verify(analyze: Path) -> None:
    result = _verify(analyze, *UNITS)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == result.stdout.strip() == ""
    # The check bites: an unknown key and a missing program are reported.
    broken = analyze / "gpu-exporter.service"
    broken.write_text(broken.read_text().replace("ProtectClock=yes", "ProtectClok=yes")
                      .replace(str(analyze), "/nonexistent"))
    result = _verify(analyze, "gpu-exporter.service")
    assert result.returncode != 0
    assert "Unknown key 'ProtectClok'" in result.stderr
    assert "is not executable" in result.stderr


def test_exporter_runs_as_its_own_user_with_no_capability(analyze: Path) -> None:
    unit = _settings("gpu-exporter.service")
    assert unit["User"] == unit["Group"] == ["gpu-exporter"]
    assert unit["CapabilityBoundingSet"] == unit["AmbientCapabilities"] == [""]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["ReadWritePaths"] == ["-/run/gpu-exporter/torch"]
    # What would break the exporter stays off: device nodes, other users' processes and uids.
    for key in ("PrivateDevices", "ProtectProc", "ProcSubset", "PrivateUsers", "DynamicUser"):
        assert key not in unit, key
    # systemd's own exposure score (0 best, 10 worst), from the unit file alone.
    assert ANALYZE is not None
    scored = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager",
                             "--threshold=20", "./gpu-exporter.service"], cwd=analyze,
                            capture_output=True, text=True, timeout=60, check=False)
    score = re.search(r"Overall exposure level for gpu-exporter.service: ([\d.]+)",
                      scored.stdout)
    assert score, scored.stdout[-500:] + scored.stderr
    print(f"\nsystemd-analyze security: gpu-exporter.service exposure {score[1]}")
    assert scored.returncode == 0, f"exposure {score[1]} above 2.0"


def test_sysusers_and_tmpfiles_make_the_user_and_the_torch_directory(tmp_path: Path) -> None:
    sysusers, tmpfiles = shutil.which("systemd-sysusers"), shutil.which("systemd-tmpfiles")
    if sysusers is None or tmpfiles is None:
        pytest.skip("systemd-sysusers or systemd-tmpfiles missing (Debian's systemd package)")
    for directory, source in (("sysusers.d", "gpu-exporter.sysusers"),
                              ("tmpfiles.d", "gpu-exporter.tmpfiles")):
        (tmp_path / "etc" / directory).mkdir(parents=True)
        shutil.copy(SYSTEMD / source, tmp_path / "etc" / directory / "gpu-exporter.conf")
    for command in ([sysusers, f"--root={tmp_path}"], [tmpfiles, f"--root={tmp_path}", "--create"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
    (entry,) = [line.split(":") for line in (tmp_path / "etc/passwd").read_text().splitlines()
                if line.startswith("gpu-exporter:")]
    assert int(entry[2]) < 1000  # a system user
    assert entry[6] == "/usr/sbin/nologin"
    torch = (tmp_path / "run/gpu-exporter/torch").stat()
    assert (torch.st_mode & 0o7777, torch.st_uid) == (0o1777, int(entry[2]))


def test_exporter_settings_are_flags_it_knows() -> None:
    environ = {}
    for line in (SYSTEMD / "gpu-exporter.default").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            environ[key] = value.strip('"')
    assert unknown_env(environ) == []
    listen = next(f for f in FLAGS if f.env == "GPU_EXPORTER_WEB_LISTEN_ADDRESS")
    assert environ[listen.env].startswith("127.0.0.1:")  # user names stay on the machine
    assert "ARGS" in environ
    assert _settings("gpu-exporter.service")["ExecStart"][0].endswith("gpu-exporter $ARGS")


def _promtool(config: Path) -> str:
    result = subprocess.run([str(PROMTOOL), "check", "config", str(config)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.skipif(not PROMTOOL.exists(), reason="needs Debian's prometheus package (promtool)")
@pytest.mark.parametrize("name", ["prometheus.yml", "gpu-exporter.yml"])
def test_prometheus_files_pass_promtool_with_the_rules(name: str, tmp_path: Path) -> None:
    """As installed: the file in /etc/prometheus, the rules in rules/gpu-exporter/ beside it."""
    shutil.copy(SYSTEMD / "prometheus" / name, tmp_path / "prometheus.yml")
    rules = tmp_path / "rules" / "gpu-exporter"
    rules.mkdir(parents=True)
    for rule_file in RULES:
        shutil.copy(rule_file, rules)
    output = _promtool(tmp_path / "prometheus.yml")
    checked = subprocess.run([str(PROMTOOL), "check", "rules", *map(str, sorted(rules.iterdir()))],
                             capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    expected = sum(len(g["rules"]) for f in RULES for g in yaml.safe_load(f.read_text())["groups"])
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", output))
    assert found == expected, output
    config = yaml.safe_load((SYSTEMD / "prometheus" / name).read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "gpu-exporter"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9477"]}]
    assert re.fullmatch(".*gpu-exporter.*", job["job_name"])  # what GpuExporterDown selects


def test_the_workstation_page_names_files_that_exist() -> None:
    text = (ROOT / "docs" / "workstation.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![/\w])((?:systemd|dashboards)/[\w./*-]+)", text))
    assert {f"systemd/{unit}" for unit in UNITS} <= named
    for name in sorted(named):
        assert list(ROOT.glob(name.rstrip(".,"))), f"docs/workstation.md names {name}"
