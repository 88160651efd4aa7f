"""Clients that hold descriptors or never read: every descriptor counted, EMFILE never
reaches asyncio, refusals logged once a burst, output and parsed pipelines bounded, and
connections whose output does not drain dropped (after the write timeout, beyond the total,
and at shutdown)."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from exporter.web.connections import REFUSAL_QUIET_SECONDS, ConnectionTable, State
from exporter.web.output import CHUNK_BYTES, ChunkedBodies
from exporter.web.protocol import MAX_PIPELINED, UVICORN_CONTRACT, uvicorn_mismatches
from exporter.web.server import fd_budget
from tests.web.serving import serving


class _Transport:
    """What the table uses of an asyncio transport."""

    def __init__(self, buffered: int = 0) -> None:
        self.aborted = False
        self.buffered = buffered

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return self.buffered


def _table(now: list[float], **kwargs: Any) -> ConnectionTable:
    return ConnectionTable(limit=4, header_timeout=10.0, idle_timeout=60.0,
                           clock=lambda: now[0], **kwargs)


def _admit(table: ConnectionTable, socks: list[socket.socket]) -> bool:
    left, right = socket.socketpair()
    socks += [left, right]
    return table.admit(left)


def test_connections_being_closed_hold_descriptors_and_count(
        caplog: pytest.LogCaptureFixture) -> None:
    now, socks = [0.0], []
    table = _table(now, max_closing=2)
    try:
        assert all(_admit(table, socks) for _ in range(4))
        now[0] = 5.0  # past the grace: the NEW ones may be evicted
        assert _admit(table, socks)  # evicts one (closing: 1)
        assert _admit(table, socks)  # evicts one (closing: 2)
        assert not _admit(table, socks)  # 4 open + 2 closing: no descriptor left for more
        assert len(table) == 6
        assert table.counts()["closing"] == 2
        for _ in range(20):
            assert not _admit(table, socks)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]  # one line a burst
        assert "connection limit 4 reached (6 connections open: 4 new, 2 closing)" in (
            warnings[0].getMessage())
        now[0] += REFUSAL_QUIET_SECONDS  # a quiet spell: the next burst is logged again
        assert not _admit(table, socks)
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
        assert table.refused == 22
    finally:
        for sock in socks:
            sock.close()


def test_fd_budget_counts_what_is_open_and_what_is_closing() -> None:
    code = textwrap.dedent("""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        from exporter.web.server import fd_budget
        budget = fd_budget(1024)
        print(budget.soft_limit, budget.open_at_start, budget.headroom, budget.connections,
              budget.closing)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    soft, opened, headroom, connections, closing = map(int, out)
    assert soft == 256
    assert headroom >= 32
    # Everything a connection can hold fits, with the headroom and the server's two spare.
    assert opened + connections + closing + 2 + headroom <= soft
    assert connections > 128  # and the rest goes to connections
    assert fd_budget(8).connections == 8  # a limit the descriptors allow is kept


def test_accept_meeting_emfile_refuses_the_connection_without_a_traceback() -> None:
    """Descriptors exhausted by something else: the pending connection is accepted with the
    spare descriptor and closed; asyncio never sees EMFILE."""
    code = textwrap.dedent("""
        import os, resource, socket, sys
        from exporter.web.connections import ConnectionTable, GuardedSocket
        listener = socket.create_server(("127.0.0.1", 0))
        table = ConnectionTable(limit=1000, header_timeout=10, idle_timeout=60)
        guarded = GuardedSocket.wrap(listener, table)
        print(guarded.getsockname()[1], flush=True)
        sys.stdin.readline()  # the client connected
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        hog = []
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            guarded.accept()
            print("accepted")
        except ConnectionAbortedError as exc:
            print("refused", exc, table.refused)
        for fd in hog[:4]:
            os.close(fd)
        print("spare", guarded._spare >= 0)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        port = int(child.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            child.stdin.write("go\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=60)
            assert "refused out of file descriptors 1" in out, (out, err)
            assert "spare True" in out  # taken again for the next time
            assert "Traceback" not in err
            client.settimeout(10)
            try:  # closed by the server, not left waiting in the backlog
                answer = client.recv(10)
            except ConnectionResetError:
                answer = b""
            assert answer == b""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_output_that_does_not_drain_is_dropped_after_the_write_timeout() -> None:
    now, socks = [0.0], []
    table = _table(now, write_timeout=10.0, max_stalled=2)
    try:
        transports = []
        for _ in range(4):
            assert _admit(table, socks)
            fd = socks[-2].fileno()
            transports.append(_Transport())
            table.attach(fd, transports[-1])  # type: ignore[arg-type]
            table.mark(fd, State.BUSY)
        fds = [socks[i].fileno() for i in range(0, 8, 2)]
        table.stalled(fds[0], True)
        now[0] = 1.0
        table.stalled(fds[1], True)
        table.stalled(fds[1], False)  # drained: no longer counts
        now[0] = 9.0
        table.sweep()
        assert not any(t.aborted for t in transports)
        now[0] = 10.0
        table.sweep()
        assert [t.aborted for t in transports] == [True, False, False, False]
        # The total: beyond max_stalled waiting, the one waiting longest goes.
        table.stalled(fds[1], True)
        now[0] = 11.0
        table.stalled(fds[2], True)
        table.stalled(fds[3], True)
        assert [t.aborted for t in transports] == [True, True, False, False]
        assert table.aborted == 2
    finally:
        for sock in socks:
            sock.close()


def test_shutdown_aborts_output_that_does_not_drain() -> None:
    now, socks = [0.0], []
    table = _table(now)
    try:
        transports = []
        for buffered in (0, 100):
            assert _admit(table, socks)
            fd = socks[-2].fileno()
            transports.append(_Transport(buffered))
            table.attach(fd, transports[-1])  # type: ignore[arg-type]
        table.stalled(socks[0].fileno(), True)
        table.begin_shutdown()  # outside a loop: the stalled one at once
        assert [t.aborted for t in transports] == [True, False]
        table._abort_unflushed()  # what the loop runs SHUTDOWN_FLUSH_SECONDS later
        assert [t.aborted for t in transports] == [True, True]
    finally:
        for sock in socks:
            sock.close()


def test_bodies_go_out_in_pieces() -> None:
    sent: list[MutableMapping[str, Any]] = []
    body = bytes(range(256)) * (CHUNK_BYTES // 64)  # four pieces

    async def app(scope: Any, receive: Any, send: Callable[[Any], Awaitable[None]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def record(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(ChunkedBodies(app)({"type": "http"}, None, record))  # type: ignore[arg-type]
    pieces = [m for m in sent if m["type"] == "http.response.body"]
    assert [len(m["body"]) for m in pieces] == [CHUNK_BYTES] * 4
    assert [m["more_body"] for m in pieces] == [True, True, True, False]
    assert b"".join(m["body"] for m in pieces) == body


def test_a_client_that_pipelines_and_never_reads_gets_few_requests_parsed() -> None:
    with serving() as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 5000)  # 175 KB: one read
        deadline = time.monotonic() + 10
        while server.table.counts()["busy"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        protocols = list(server.server.server_state.connections)
        assert protocols
        # Parsed and waiting: at most the bound plus one piece fed to the parser at once.
        assert max(len(p.pipeline) for p in protocols) <= MAX_PIPELINED + 1024 // 30


def test_the_uvicorn_internals_relied_on_are_there() -> None:
    """Fails loudly when a uvicorn release changes what the guarded protocol relies on:
    the methods it overrides or calls (with their parameters) and the attributes it reads
    on a live connection."""
    assert uvicorn_mismatches() == []
    assert UVICORN_CONTRACT
    with serving() as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        (protocol,) = server.server.server_state.connections
        for name in ("cycle", "pipeline", "flow", "transport", "url", "headers"):
            assert hasattr(protocol, name), name
        assert hasattr(protocol.cycle, "response_complete")
        assert hasattr(protocol.flow, "write_paused")
