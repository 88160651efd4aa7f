"""Connection bounds and timeouts over real sockets: idle and half-sent connections are
closed, the limit evicts the longest-waiting idle connection so a new client gets in, and a
table full of busy connections refuses new ones without crashing."""

from __future__ import annotations

import re
import socket
import threading
import time

import httpx
import pytest

from exporter.web.connections import ConnectionTable, State
from exporter.web.protocol import MAX_HEAD_BYTES
from exporter.web.server import ServerLimits
from tests.web.serving import serving, small_app


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (fails after ``seconds``)."""
    sock.settimeout(seconds)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        pytest.fail(f"connection still open after {seconds}s")
    return time.monotonic() - started


def test_silent_and_slowloris_connections_are_closed() -> None:
    limits = ServerLimits(read_header_timeout=1.0, idle_timeout=30.0)
    with serving(limits=limits) as server:
        silent = socket.create_connection(("127.0.0.1", server.port))
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a header line every 0.4 s never completes the head
            time.sleep(0.4)
            try:
                slow.sendall(b"X-A: b\r\n")
            except OSError:
                break
        assert _closed_within(silent, 5) < 5
        assert _closed_within(slow, 5) < 5
        assert server.table.timed_out >= 2
        assert httpx.get(server.url("/metrics")).status_code == 200


def test_request_head_over_the_bound_gets_431_and_is_closed() -> None:
    with serving() as server:
        big = socket.create_connection(("127.0.0.1", server.port))
        big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        sent = 0
        try:  # header lines a read at a time, never ending the head
            while sent <= 2 * MAX_HEAD_BYTES:
                big.sendall(line)
                sent += len(line)
                time.sleep(0.001)
        except OSError:
            pass
        big.settimeout(5)
        answer = big.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431 "), answer
        _closed_within(big, 5)
        # A head just under the bound is served.
        filler = "a" * (MAX_HEAD_BYTES - 200)
        assert httpx.get(server.url("/metrics"), headers={"X-Filler": filler}).status_code == 200


def test_a_head_over_the_bound_sent_whole_gets_431_after_the_requests_before_it() -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    big = b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
    with serving() as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request * 2 + big + request)  # one read: nothing incomplete at its end
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]
    assert statuses == [200, 200, 431]  # answered in order; what follows it is not read


def test_idle_keep_alive_connection_is_closed_after_idle_timeout() -> None:
    limits = ServerLimits(read_header_timeout=5.0, idle_timeout=1.0)
    with serving(limits=limits) as server:
        conn = socket.create_connection(("127.0.0.1", server.port))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.settimeout(5)
        assert b"200 OK" in conn.recv(4096)
        started = time.monotonic()
        _closed_within(conn, 5)
        assert 0.5 < time.monotonic() - started < 4


def test_limit_evicts_waiting_connections_so_a_scraper_gets_in() -> None:
    limits = ServerLimits(max_connections=20, read_header_timeout=60.0, idle_timeout=60.0)
    with serving(limits=limits) as server:
        hogs = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(60)]
        time.sleep(1.2)  # older than the grace period: evictable
        assert len(server.table) <= 21
        for _ in range(5):
            assert httpx.get(server.url("/metrics"), timeout=5).status_code == 200
        # The 40 over the limit arrived in a burst: refused (the 20 before them were too young
        # to evict); later the scrapers' connections evicted the oldest idle hogs.
        assert server.table.refused >= 40
        assert server.table.evicted >= 1
        for hog in hogs:
            hog.close()


def test_full_of_busy_connections_refuses_and_recovers() -> None:
    limits = ServerLimits(max_connections=3, max_other_requests=10)
    with serving(small_app(slow_seconds=1.5), limits=limits) as server:
        busy = [threading.Thread(target=httpx.get, args=(server.url("/api/v1/snapshot"),),
                                 kwargs={"timeout": 10}) for _ in range(3)]
        for thread in busy:
            thread.start()
        deadline = time.monotonic() + 5
        while server.table.counts()["busy"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url("/metrics"), timeout=2)
        assert server.table.refused >= 1
        for thread in busy:
            thread.join()
        assert httpx.get(server.url("/metrics"), timeout=5).status_code == 200


def test_table_state_machine() -> None:
    now = [0.0]
    table = ConnectionTable(limit=2, header_timeout=1.0, idle_timeout=5.0, clock=lambda: now[0])
    pairs = [socket.socketpair() for _ in range(4)]
    a, b, c, d = (p[0] for p in pairs)
    assert table.admit(a)
    assert table.admit(b)
    table.mark(a.fileno(), State.BUSY)
    now[0] = 0.4
    assert not table.admit(c)  # b is younger than the grace period (0.5 s): c is refused
    now[0] = 0.5
    assert table.admit(c)  # b (NEW, the oldest not busy) is evicted
    assert table.counts()["closing"] == 1
    assert table.evicted == 1
    table.release(b.fileno())
    table.mark(a.fileno(), State.IDLE)  # a served its request
    now[0] = 1.2
    assert table.admit(d)  # c (NEW) goes before a (IDLE, older, but it served a request)
    assert table.counts() == {"new": 1, "reading": 0, "busy": 0, "idle": 1, "closing": 1}
    table.release(c.fileno())
    now[0] = 2.3
    assert table.sweep() == 1  # d: no request head within 1 s
    now[0] = 6.6
    assert table.sweep() == 1  # a: idle longer than 5 s
    for left, right in pairs:
        left.close()
        right.close()
