"""Signals against the real process: SIGTERM and SIGINT end it within 5 s in every state, start
included (a blocked open too); what still runs after ``STOP_DEADLINE_SECONDS`` does not hold
it; SIGHUP re-reads the files or is ignored with one line, and never ends it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from exporter.signals import STOP_DEADLINE_SECONDS
from tests.e2e.server import ROOT, ExporterProcess

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "shared-workstation")
FAKE_NVML = "tests.e2e.fake_nvml_main"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    return {**env, "PYTHONPATH": str(ROOT)}


def _wait_until_caught(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Until the exporter's handlers are in place (SIGHUP, installed last, in the process's
    SigCgt mask; Python catches SIGINT itself from early on): a signal before that, in the
    interpreter's own start, acts by default whatever the program does."""
    signum = signal.SIGHUP
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/status", encoding="ascii") as status:
            caught = next(int(line.split()[1], 16) for line in status
                          if line.startswith("SigCgt:"))
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.002)
    pytest.fail(f"no handler for {signal.Signals(signum).name} after {timeout} s")


def _wait_until_blocked_on_fifo(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Until ``proc`` waits in the kernel for a FIFO's writer (its imports are done)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{proc.pid}/wchan", encoding="ascii") as wchan:
            if wchan.read() == "wait_for_partner":
                return
        assert proc.poll() is None
        assert time.monotonic() < deadline, "never blocked in the open"
        time.sleep(0.01)


def _stop_seconds(proc: subprocess.Popen[bytes], sig: int) -> tuple[int, float]:
    begin = time.monotonic()
    proc.send_signal(sig)
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        pytest.fail(f"still running 10 s after {signal.Signals(sig).name}")
    return code, time.monotonic() - begin


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_start_blocked_in_open_ends_at_once(sig: int, tmp_path: Path) -> None:
    """A file read that blocks (here: a FIFO opened the blocking way, in place of the checks;
    the exporter's own reads never block) is interrupted by the signal."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = ("import sys, exporter.cli as cli, exporter.entry as entry\n"
            f"cli.check_files = lambda config: open({str(fifo)!r}, 'rb')\n"
            "sys.argv[1:] = ['--source', 'simulated', '--scenario', 'shared-workstation']\n"
            "sys.exit(entry.main())\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(),
                            stderr=subprocess.PIPE)
    _wait_until_blocked_on_fifo(proc)
    status, seconds = _stop_seconds(proc, sig)
    assert status == 0
    assert seconds < STOP_DEADLINE_SECONDS
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert b"Traceback" not in stderr
    assert b"exiting now" not in stderr  # ended by the signal, not by the deadline's timer


def test_what_still_runs_after_the_deadline_does_not_hold_the_process() -> None:
    """A thread that never returns (as a call hung in a driver may): exit at the deadline."""
    code = ("import threading, time, exporter.signals as signals\n"
            "signals.install_stop_handler()\n"
            "signals.StopRequest.starting = False  # as while serving: the signal only records\n"
            "threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(),
                            stderr=subprocess.PIPE)
    _wait_until_caught(proc)
    time.sleep(0.2)
    status, seconds = _stop_seconds(proc, signal.SIGTERM)
    assert status == 0
    assert STOP_DEADLINE_SECONDS - 0.1 < seconds < 5
    assert proc.stderr is not None
    assert b"exiting now" in proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_signal_handling_itself_loads_is_a_quiet_exit_0(sig: int) -> None:
    """The earliest moment the exporter's code runs: ``exporter.signals`` still loading
    (held here by an import hook until the signal came)."""
    code = ("import sys\n"
            "class Hold:\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'exporter.signals':\n"
            "            print('loading', flush=True)\n"
            "            sys.stdin.readline()\n"
            "sys.meta_path.insert(0, Hold())\n"
            "import exporter.entry\n"
            "print('loaded', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "loading\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "loaded" not in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8])
def test_a_signal_while_starting_ends_it_with_0(sig: int, delay: float) -> None:
    """From the moment the handler is in place (the first thing the exporter does)."""
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "--web.listen-address",
                             "127.0.0.1:0", *SIM], cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_until_caught(proc)
    time.sleep(delay)
    status, seconds = _stop_seconds(proc, sig)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert status == 0, stderr.decode()[-2000:]
    assert seconds < 5
    assert b"Traceback" not in stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_collection_hangs_and_clients_hold_connections(sig: int) -> None:
    env = {"GPU_EXPORTER_TEST_HANG": "nvmlDeviceGetUtilizationRates"}
    with ExporterProcess("--source", "nvml", env=env, module=FAKE_NVML,
                         wait_ready=False) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        waiting = threading.Thread(target=lambda: _quietly_get(server.url("/metrics")))
        waiting.start()  # a scrape waiting for the hung collection
        time.sleep(0.5)
        begin = time.monotonic()
        status = server.stop(sig)
        seconds = time.monotonic() - begin
        waiting.join(10)
        for sock in [*idle, slow]:
            sock.close()
    assert status == 0
    assert seconds < 5
    assert "Traceback" not in server.log


def _quietly_get(url: str) -> None:
    with contextlib.suppress(httpx.TransportError):
        httpx.get(url, timeout=10)


def test_sighup_while_starting_is_ignored_with_one_line() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "--web.listen-address",
                             "127.0.0.1:0", *SIM], cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until_caught(proc)  # then importing for a second or so
        proc.send_signal(signal.SIGHUP)
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                break
        assert proc.poll() is None  # not ended by it (the default action would)
        assert sum("SIGHUP" in line for line in lines) == 1, lines
        assert any("SIGHUP while starting: ignored" in line for line in lines), lines
    finally:
        status, _ = _stop_seconds(proc, signal.SIGTERM)
    assert status == 0


def test_sighup_while_serving_reloads_and_is_logged() -> None:
    with ExporterProcess(*SIM) as server:
        for _ in range(3):
            server.proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)
        assert httpx.get(server.url("/metrics"), timeout=10).status_code == 200
        assert server.proc.poll() is None
        assert server.stop() == 0
    assert sum("SIGHUP: no web config file" in line for line in server.lines) == 3
