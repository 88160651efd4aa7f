"""Every path the exporter reads, named as something other than a readable file of sane size:
at start an exit 2 with one line naming the flag and the problem (or a start with the feature
off and a warning); at run time a logged error counted in ``errors_total`` while scrapes go on.
Against the real process (the NVML cases through the fake pynvml)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from exporter.catalogue import metrics
from tests.e2e.server import ROOT, ExporterProcess, exporter_command, run_exporter
from tests.processes import LoggedServer
from tests.web.tlsfiles import Authority, write_web_config

pytestmark = pytest.mark.slow
FAKE_NVML = "tests.e2e.fake_nvml_main"
PASSWD = Path(__file__).resolve().parents[1] / "fixtures" / "host_passwd"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO, not a regular file"


def _directory(path: Path) -> str:
    path.mkdir()
    return "Is a directory"


def _device(path: Path) -> str:
    path.symlink_to("/dev/zero")  # a link to a device: the device is what is refused
    return "is a character device, not a regular file"


def _loop(path: Path) -> str:
    other = path.with_name(path.name + "-other")
    path.symlink_to(other)
    other.symlink_to(path)
    return "Too many levels of symbolic links"


def _sparse(path: Path) -> str:
    with path.open("wb") as handle:
        handle.truncate(4 << 30)  # 4 GiB, no disk used
    return "is 4.0 GiB, larger than the"


def _socket(path: Path) -> str:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    _SOCKETS.append(server)
    return "is a socket, not a regular file"


_SOCKETS: list[socket.socket] = []
KINDS: dict[str, Callable[[Path], str]] = {
    "fifo": _fifo, "directory": _directory, "device": _device, "symlink loop": _loop,
    "4 GiB sparse file": _sparse, "socket": _socket,
}


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while _SOCKETS:
        _SOCKETS.pop().close()


def _args(reader: str, bad: Path, tmp_path: Path) -> tuple[list[str], str]:
    """The command line naming ``bad`` for ``reader``, and the flag its error names."""
    sim = ["--source", "simulated", "--scenario", "shared-workstation"]
    if reader == "passwd":
        return [*sim, "--passwd-file", str(bad)], "--passwd-file"
    if reader == "web config":
        return [*sim, "--web.config.file", str(bad)], "--web.config.file"
    if reader == "certificate":
        pair = Authority(tmp_path).issue("server", "exporter")
        config = write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {bad}\n"
                                            f"  key_file: {pair.key}\n")
        return [*sim, "--web.config.file", config], "tls_server_config.cert_file"
    if reader == "scenario":
        return ["--source", "simulated", "--scenario", str(bad)], "--scenario"
    assert reader == "procfs"
    return [*sim, "--procfs", str(bad.parent)], "--procfs"  # bad is <procfs>/stat


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("reader", ["passwd", "web config", "certificate", "scenario", "procfs"])
def test_a_bad_path_at_start_is_one_line_naming_the_flag_and_the_problem(
        reader: str, kind: str, tmp_path: Path) -> None:
    bad = tmp_path / "proc" / "stat" if reader == "procfs" else tmp_path / "bad"
    bad.parent.mkdir(exist_ok=True)
    problem = KINDS[kind](bad)
    args, flag = _args(reader, bad, tmp_path)
    begin = time.monotonic()
    result = run_exporter(args, timeout=20)
    elapsed = time.monotonic() - begin
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-exporter: error: ")
    assert flag in lines[0]
    assert problem.lower() in lines[0].lower(), lines[0]
    assert elapsed < 10  # not blocked on a FIFO, not reading gigabytes


def test_paths_of_optional_features_start_with_the_feature_off_and_a_warning(
        tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with ExporterProcess("--source", "nvml", "--collector.torch", "--torch.dir", str(fifo),
                         "--kubernetes", "--kubernetes.pod-logs-dir", str(fifo),
                         "--kubernetes.pod-resources-socket", str(fifo),
                         "--containers", "--containers.docker-root", str(fifo),
                         module=FAKE_NVML) as proc:
        response = httpx.get(proc.url("/metrics"), timeout=10)
    assert response.status_code == 200
    warnings = "\n".join(line for line in proc.lines if "level=warn" in line)
    assert "--torch.dir" in warnings
    assert "--kubernetes.pod-logs-dir" in warnings
    assert 'gpu_exporter_pod_resources_status{status="not_a_socket"} 1' in response.text
    assert "Traceback" not in proc.log


def _errors(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^gpu_exporter_errors_total\{kind="([^"]+)"\} (\S+)$', text, re.MULTILINE)}


def _scrape(proc: ExporterProcess, **kwargs: object) -> httpx.Response:
    begin = time.monotonic()
    response = httpx.get(proc.url("/metrics"), timeout=10, **kwargs)  # type: ignore[arg-type]
    assert time.monotonic() - begin < 3  # never blocked on the file
    return response


def _wait_for(proc: LoggedServer, pattern: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [line for line in proc.lines if re.search(pattern, line)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r}: {proc.log}")


def _process_users(text: str) -> set[str]:
    return set(re.findall(rf'^{metrics.PROCESS_MEMORY.name}{{[^}}]*user="([^"]*)"', text,
                          re.MULTILINE))


def test_passwd_file_turning_bad_at_run_time_is_logged_counted_and_recovered(
        tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    shutil.copy(PASSWD, passwd)
    me = f"me:x:{os.getuid()}:0::/:/bin/sh\n"
    passwd.write_text(me + PASSWD.read_text(encoding="utf-8"), encoding="utf-8")
    with ExporterProcess("--source", "nvml", "--passwd-file", str(passwd),
                         "--collector.min-interval", "0", module=FAKE_NVML) as proc:
        assert _process_users(_scrape(proc).text) == {"me"}
        for make in (_fifo, _sparse, _directory):
            if passwd.is_dir():
                passwd.rmdir()
            else:
                passwd.unlink()
            before = _errors(_scrape(proc).text).get("passwd_file", 0)
            make(passwd)
            deadline = time.monotonic() + 10  # the file is checked at most once a second
            while _errors(text := _scrape(proc).text).get("passwd_file", 0) <= before:
                assert time.monotonic() < deadline, f"{make.__name__}: no failed check counted"
                time.sleep(0.05)
            assert _process_users(text) == {str(os.getuid())}  # numeric while the file is bad
        # logged once while it stays bad, whatever it turns into
        assert "is a FIFO" in _wait_for(proc, "passwd file .* cannot be read")
        assert len([line for line in proc.lines if "cannot be read" in line]) == 1
        passwd.rmdir()
        passwd.write_text(me, encoding="utf-8")
        proc.proc.send_signal(signal.SIGHUP)  # re-read at once
        _wait_for(proc, r"passwd file .* read: 1 users")
        assert _process_users(_scrape(proc).text) == {"me"}
        assert proc.stop() == 0


def test_web_config_turning_bad_at_run_time_keeps_the_last_good_one_and_counts(
        tmp_path: Path) -> None:
    import bcrypt  # noqa: PLC0415

    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    path = Path(write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{hashed}'\n"
                                           "unauthenticated_paths: [/healthz]\n"))
    sim = ("--source", "simulated", "--scenario", "shared-workstation")
    with ExporterProcess(*sim, "--web.config.file", str(path), wait_ready=False) as proc:
        assert _scrape(proc, auth=("prom", "secret")).status_code == 200
        path.unlink()
        os.mkfifo(path)
        deadline = time.monotonic() + 10  # requests check the file (once a second)
        while "\ngpu_exporter_web_config_last_reload_successful 0" not in (
                text := _scrape(proc, auth=("prom", "secret")).text):
            assert time.monotonic() < deadline, text
            time.sleep(0.05)
        assert _errors(text).get("web_config") == 1
        assert _scrape(proc).status_code == 401  # the last good config: still auth
        assert "is a FIFO" in _wait_for(proc, "web config not reloaded")
        proc.proc.send_signal(signal.SIGHUP)
        _wait_for(proc, r"SIGHUP: web config kept")
        path.unlink()
        path.write_text(f"basic_auth_users:\n  other: '{hashed}'\n"
                        "unauthenticated_paths: [/healthz]\n", encoding="utf-8")
        proc.proc.send_signal(signal.SIGHUP)
        _wait_for(proc, r"SIGHUP: web config reloaded")
        assert _scrape(proc, auth=("other", "secret")).status_code == 200
        assert _errors(_scrape(proc, auth=("other", "secret")).text).get("web_config") == 2
        assert proc.stop() == 0


def test_weakening_settings_are_accepted_with_a_warning(tmp_path: Path) -> None:
    pair = Authority(tmp_path).issue("server", "exporter")
    path = Path(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {pair.cert}\n"
                                           f"  key_file: {pair.key}\n  min_version: TLS10\n"))
    path.chmod(0o666)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    with LoggedServer(exporter_command(
            "--web.listen-address", "127.0.0.1:0", "--source", "simulated", "--scenario",
            "shared-workstation", "--web.config.file", str(path)), cwd=ROOT, env=env) as proc:
        assert proc.port_seen.wait(30), proc.log
        assert proc.stop() == 0
    warnings = [line for line in proc.lines if "level=warn" in line]
    assert any("writable by every user" in line for line in warnings), proc.log
    assert any("min_version: TLS10 allows TLS versions below 1.2" in line
               for line in warnings), proc.log
