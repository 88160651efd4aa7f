"""Hostile clients against the real process: a flood of connections under a low open-file
limit never makes ``accept`` fail (no EMFILE traceback, one log line a burst), and clients
that ask and never read never hold up SIGTERM."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from exporter.signals import STOP_DEADLINE_SECONDS
from tests.e2e.server import ROOT, exporter_command
from tests.processes import LoggedServer

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "synthetic:8x32")
#: What a traceback or an exhausted descriptor table looks like in the log.
BAD = ("Traceback", "EMFILE", "Too many open files", "out of system resource")


def _exporter(*args: str, open_files: int | None = None) -> LoggedServer:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    server = LoggedServer(exporter_command("--web.listen-address", "127.0.0.1:0", *SIM, *args),
                          cwd=ROOT, env=env, open_files=open_files)
    server.wait_until(lambda: httpx.get(_url(server), timeout=2).status_code == 200,
                      "/metrics", 30, errors=(httpx.TransportError,))
    return server


def _url(server: LoggedServer, path: str = "/metrics") -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def _descriptors(server: LoggedServer) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def _stop(server: LoggedServer) -> float:
    started = time.monotonic()
    assert server.stop() == 0
    return time.monotonic() - started


def test_a_connection_flood_under_ulimit_256_never_exhausts_descriptors() -> None:
    with _exporter("--web.read-header-timeout", "1s", open_files=256) as server:
        socks: list[socket.socket] = []
        try:
            for _ in range(3):  # bursts: evictions and timeouts leave connections closing
                for _ in range(400):
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex(("127.0.0.1", server.port))
                    socks.append(sock)
                deadline = time.monotonic() + 10  # until the table is full
                while not any("connection limit" in line for line in server.lines):
                    assert time.monotonic() < deadline, server.log
                    time.sleep(0.05)
                peak = _descriptors(server)  # then until the header timeout shuts some down
                while _descriptors(server) >= peak:
                    assert time.monotonic() < deadline, server.log
                    time.sleep(0.05)
            # A scrape gets in (a new connection is refused while every open one is younger
            # than the grace period, as a scraper retries at its next interval).
            server.wait_until(lambda: httpx.get(_url(server), timeout=10).status_code == 200,
                              "a scrape during the flood", 20, errors=(httpx.TransportError,))
        finally:
            for sock in socks:
                sock.close()
        assert _stop(server) < STOP_DEADLINE_SECONDS
    assert not [line for line in server.lines if any(bad in line for bad in BAD)], server.log
    limit_lines = [line for line in server.lines if "connection limit" in line]
    assert len(limit_lines) == 1, limit_lines  # one line for the burst
    assert "open-file limit 256 allows only" in server.log


def test_clients_that_never_read_do_not_hold_up_sigterm() -> None:
    """(Dropping them beyond the total and after the write timeout: the unit tests in
    tests/web/test_hostile_clients.py; the memory they cost: the reliability bench.)"""
    with _exporter() as server:
        socks: list[socket.socket] = []
        try:
            for _ in range(24):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", server.port))
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 24)  # ~6 MB asked
                socks.append(sock)
            # Served after them: their answers are being written, and never read.
            assert httpx.get(_url(server), timeout=30).status_code == 200
            seconds = _stop(server)
        finally:
            for sock in socks:
                sock.close()
    assert seconds < STOP_DEADLINE_SECONDS
    assert not [line for line in server.lines if any(bad in line for bad in BAD)], server.log
    assert not [line for line in server.lines if "graceful shutdown exceeded" in line]
