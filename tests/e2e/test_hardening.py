"""Hostile inputs once found to break the exporter, against the real process, so none can
come back:
SIGTERM right after start, HEAD, non-UTF-8 --hostname, argparse's usage flood, a JSON flood
starving scrapes, a tiny scrape-timeout header raising errors_total, slowloris connections."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.e2e.server import ROOT, ExporterProcess, run_exporter

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "shared-workstation")


@pytest.mark.parametrize("delay", [0.2, 0.5, 1.5])
def test_sigterm_right_after_start_exits_0(delay: float) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "--web.listen-address",
                             "127.0.0.1:0", *SIM], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr


def test_bad_command_lines_print_one_line() -> None:
    for args in (["--web.listen-address"], ["--nope"], ["--hostname", "a\udcffb"]):
        env = {"PYTHONIOENCODING": "utf-8:surrogateescape"}
        result = run_exporter(args, env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2
        assert len(lines) == 1, lines
        assert lines[0].startswith("gpu-exporter: error: ")


def test_head_and_json_flood_and_scrape_timeout_header() -> None:
    with ExporterProcess(*SIM, "--web.max-other-requests", "2") as server:
        head = httpx.head(server.url("/metrics"))
        assert head.status_code == 200
        assert head.content == b""
        assert httpx.head(server.url("/")).status_code == 200

        # 60 clients hammer the JSON API while a scraper asks /metrics.
        stop = threading.Event()
        codes: dict[int, int] = {}

        def hammer() -> None:
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    try:
                        code = client.get(server.url("/api/v1/snapshot")).status_code
                    except httpx.TransportError:
                        code = 0
                    codes[code] = codes.get(code, 0) + 1

        threads = [threading.Thread(target=hammer) for _ in range(60)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            scrapes = []
            with httpx.Client(timeout=10) as scraper:
                for _ in range(6):
                    started = time.monotonic()
                    response = scraper.get(server.url("/metrics"),
                                           headers={"X-Prometheus-Scrape-Timeout-Seconds": "0.001"})
                    scrapes.append((response.status_code, time.monotonic() - started))
                    time.sleep(0.3)
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)
        assert [code for code, _ in scrapes] == [200] * 6, scrapes
        assert codes.get(503, 0) > 0  # the flood was shed at once, not queued
        text = httpx.get(server.url("/metrics"), headers={"Accept-Encoding": "identity"}).text
        assert 'kind="collection_timeout"' not in text  # a tiny header counts nothing


def test_slowloris_connections_do_not_stop_scrapes() -> None:
    with ExporterProcess(*SIM, "--web.max-connections", "50",
                         "--web.read-header-timeout", "1s") as server:
        hogs = []
        for _ in range(200):
            try:
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=2)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                hogs.append(sock)
            except OSError:
                pass
        time.sleep(1.5)  # past the grace period and the header timeout
        try:
            for _ in range(3):
                assert httpx.get(server.url("/metrics"), timeout=10).status_code == 200
        finally:
            for sock in hogs:
                sock.close()
        log = server.log
        assert log.count("connection limit reached") <= 10  # rate limited, not a flood


def _answers(sock: socket.socket, expected: int) -> dict[int, int]:
    """Status counts of the next ``expected`` answers on ``sock`` (bodies skipped)."""
    codes: dict[int, int] = {}
    data = b""
    answered = 0
    while answered < expected:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                break
            head = data[:end]
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            if len(data) < end + 4 + length:
                break
            status = int(head.split(b" ")[1])
            codes[status] = codes.get(status, 0) + 1
            data = data[end + 4 + length:]
            answered += 1
    return codes


def test_ten_thousand_pipelined_requests_are_all_answered() -> None:
    with ExporterProcess(*SIM) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            sender = threading.Thread(target=sock.sendall, args=(request * 10_000,))
            sender.start()  # while the answers are read: neither side blocks the other
            codes = _answers(sock, 10_000)
            sender.join(20)
        assert codes == {200: 10_000}
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            # one head over 16 KiB is still refused, pipelined behind good requests or not
            sock.sendall(request * 3 + b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 17_000
                         + b"\r\n\r\n")
            assert _answers(sock, 4) == {200: 3, 431: 1}
        assert httpx.get(server.url("/metrics"), timeout=10).status_code == 200
