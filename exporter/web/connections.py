"""Open connections, bounded and timed out at the socket, before any HTTP parsing.

uvicorn closes a keep-alive connection that stays idle after a response, but a connection
that never sends a complete request head (idle from the start, a slowloris dribbling header
bytes, a TLS handshake that never finishes) is kept forever, and nothing bounds how many
are open: ~1,100 of them exhausted file descriptors and stopped every scrape. Here:

- ``GuardedSocket`` is the listening socket; its ``accept()`` (called by asyncio's accept
  loop) registers each connection in a ``ConnectionTable`` and closes it again at once when
  the table is full and no connection can be evicted;
- the table bounds open connections: at the limit, the connection that has waited longest
  (at least a second) without ever completing a request head (still handshaking or sending
  it) is shut down to make room; only when there are none, the longest-idle keep-alive one;
  otherwise the newcomer is closed. A flood of idle or half-sent connections cannot push
  out a scraper's keep-alive connection;
- a sweep every ``SWEEP_SECONDS`` shuts down connections past their deadline: the request
  head must be complete within ``header_timeout`` of the connection (or of the first byte
  after an idle spell), and an idle keep-alive connection lasts ``idle_timeout``;
- ``guarded_protocol`` is uvicorn's httptools protocol reporting those transitions, bounding
  a request head to ``MAX_HEAD_BYTES`` (431 beyond it: the httptools parser has no bound of
  its own), bounding the requests pipelined on one connection that wait for their turn
  (``MAX_PIPELINED``: reading pauses beyond it, every request is still answered in order) and
  checking ``client_allowed_sans`` of a verified client certificate.

httptools (llhttp, in C) rather than uvicorn's pure-Python h11 protocol: under a flood of
scrapes it halved the exporter's CPU per answer (``bench/bench_load.py``,
docs/performance.md).

Everything runs on the event loop thread; ``shutdown(SHUT_RDWR)`` lets asyncio see EOF and
close the transport (and the file descriptor) the normal way.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ConnectionTable", "GuardedSocket", "guarded_protocol"]

log = logging.getLogger(__name__)

#: How often overdue connections are looked for (the timeouts' resolution).
SWEEP_SECONDS = 0.5
#: Longest request head (request line and headers) accepted: h11's default bound, which the
#: server applied while it parsed with h11.
MAX_HEAD_BYTES = 16 * 1024
#: Requests pipelined on one connection parsed ahead of the one being answered; reading the
#: connection pauses beyond it (a client that pipelines faster than it reads answers would
#: otherwise queue requests without bound). The socket buffers the rest.
MAX_PIPELINED = 256
_HEAD_END = b"\r\n\r\n"
_HEAD_TOO_LARGE_TEXT = b"request head over %d bytes\n" % MAX_HEAD_BYTES
_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                   b"content-type: text/plain; charset=utf-8\r\n"
                   b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                   % (len(_HEAD_TOO_LARGE_TEXT), _HEAD_TOO_LARGE_TEXT))


class State(enum.Enum):
    """Where a connection is; only BUSY ones (a request in progress) are never evicted."""

    NEW = "new"  # accepted: TLS handshake and the first request head still to come
    READING = "reading"  # bytes of a request head arrived after an idle spell
    BUSY = "busy"  # a request is being served
    IDLE = "idle"  # keep-alive, between requests
    CLOSING = "closing"  # shut down by us, waiting for asyncio to close it


@dataclass(slots=True)
class _Entry:
    sock: socket.socket
    state: State
    since: float  # when the state began
    deadline: float | None  # when the connection is overdue (None: never)


class ConnectionTable:
    """Every open connection of the server, by file descriptor.

    Entries also sit in one queue per kind, oldest first, so that admitting a connection at
    the limit costs O(1) however many are open (a flood accepts thousands a second).
    """

    def __init__(self, limit: int, header_timeout: float, idle_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.grace = min(1.0, header_timeout / 2)
        self._clock = clock
        self._entries: dict[int, _Entry] = {}
        self._new: OrderedDict[int, _Entry] = OrderedDict()  # NEW, in accept order
        self._waiting: OrderedDict[int, _Entry] = OrderedDict()  # IDLE/READING, oldest first
        self._closing = 0
        self._sweep: asyncio.TimerHandle | None = None
        self.refused = 0  # closed at accept: nothing could be evicted
        self.evicted = 0  # shut down to make room for a new one
        self.timed_out = 0  # shut down past their deadline
        self.accepted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def counts(self) -> dict[str, int]:
        """Open connections by state (for tests and debugging)."""
        out = {state.value: 0 for state in State}
        for entry in self._entries.values():
            out[entry.state.value] += 1
        return out

    # --- from the socket ---------------------------------------------------------------------

    def admit(self, sock: socket.socket) -> bool:
        """Register a just-accepted connection; False if it must be closed (table full)."""
        now = self._clock()
        if len(self._entries) - self._closing >= self.limit and not self._evict_one(now):
            self.refused += 1
            log.warning("connection limit reached (%d open, none evictable); refusing "
                        "connections", len(self._entries))
            return False
        fd = sock.fileno()
        entry = _Entry(sock, State.NEW, now, now + self.header_timeout)
        self._entries[fd] = self._new[fd] = entry
        self.accepted += 1
        self._schedule_sweep()
        return True

    def release(self, fd: int) -> None:
        """The connection's socket is being closed."""
        entry = self._entries.pop(fd, None)
        if entry is None:
            return
        self._new.pop(fd, None)
        self._waiting.pop(fd, None)
        if entry.state is State.CLOSING:
            self._closing -= 1

    # --- from the protocol -------------------------------------------------------------------

    def mark(self, fd: int, state: State) -> None:
        """A connection changed state (BUSY, IDLE or READING)."""
        entry = self._entries.get(fd)
        if entry is None or entry.state is State.CLOSING or entry.state is state:
            return
        if state is State.READING and entry.state is not State.IDLE:
            return  # NEW keeps its deadline from accept
        now = self._clock()
        self._new.pop(fd, None)
        self._waiting.pop(fd, None)
        entry.state, entry.since = state, now
        if state is State.BUSY:
            entry.deadline = None
        else:
            timeout = self.idle_timeout if state is State.IDLE else self.header_timeout
            entry.deadline = now + timeout
            self._waiting[fd] = entry

    # --- internals ---------------------------------------------------------------------------

    def _shut(self, fd: int, entry: _Entry) -> None:
        self._new.pop(fd, None)
        self._waiting.pop(fd, None)
        entry.state, entry.deadline = State.CLOSING, None
        self._closing += 1
        with contextlib.suppress(OSError):  # already gone: asyncio closes it
            entry.sock.shutdown(socket.SHUT_RDWR)

    def _evict_one(self, now: float) -> bool:
        # Connections that never finished a request head (idle from the start, slowloris,
        # stalled handshakes) go first, oldest first, once older than ``grace`` (in a burst of
        # accepts the newest would otherwise push out those accepted just before, whose data
        # is not read yet). Keep-alive connections, which have served a request, go only when
        # there are no such connections at all: a flood of new connections is refused rather
        # than allowed to push a working scraper's connection out.
        if self._new:
            fd, oldest = next(iter(self._new.items()))
            if oldest.since > now - self.grace:
                return False
        elif self._waiting:
            fd, oldest = next(iter(self._waiting.items()))
        else:
            return False
        self._shut(fd, oldest)
        self.evicted += 1
        return True

    def sweep(self) -> int:
        """Shut down every overdue connection; returns how many."""
        now = self._clock()
        overdue = [(fd, e) for fd, e in self._entries.items()
                   if e.deadline is not None and e.deadline <= now]
        for fd, entry in overdue:
            self._shut(fd, entry)
        self.timed_out += len(overdue)
        if overdue:
            log.debug("closed %d connections past their header or idle timeout", len(overdue))
        return len(overdue)

    def _run_sweep(self) -> None:
        self._sweep = None
        self.sweep()
        self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        if self._sweep is not None or not self._entries:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside a loop (unit tests call sweep() themselves)
            return
        self._sweep = loop.call_later(SWEEP_SECONDS, self._run_sweep)


class _TrackedSocket(socket.socket):
    """An accepted connection that leaves its table when closed."""

    table: ConnectionTable | None = None

    def close(self) -> None:
        table, self.table = self.table, None
        if table is not None and self.fileno() >= 0:
            table.release(self.fileno())
        super().close()


class GuardedSocket(socket.socket):
    """A listening socket whose ``accept()`` enforces the table's limit.

    ``before_accept`` runs first (the web config's reload check, so that a rotated
    certificate is used from the very next handshake).
    """

    table: ConnectionTable
    before_accept: Callable[[], Any] | None = None

    @classmethod
    def wrap(cls, sock: socket.socket, table: ConnectionTable,
             before_accept: Callable[[], Any] | None = None) -> GuardedSocket:
        """Take over ``sock`` (which is detached and must not be used afterwards)."""
        guarded = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        guarded.table = table
        guarded.before_accept = before_accept
        return guarded

    def accept(self) -> tuple[socket.socket, Any]:
        if self.before_accept is not None:
            self.before_accept()
        fd, address = self._accept()  # type: ignore[attr-defined]
        conn = _TrackedSocket(self.family, self.type, self.proto, fileno=fd)
        if not self.table.admit(conn):
            conn.close()
            # asyncio's accept loop treats this as "nothing more to accept right now".
            raise ConnectionAbortedError("connection limit reached")
        conn.table = self.table
        return conn, address


def _peer_names(peercert: Any) -> set[str]:
    names: set[str] = set()
    for kind, value in (peercert or {}).get("subjectAltName", ()):
        if kind in ("DNS", "IP Address", "email", "URI"):
            names.add(_ip_text(str(value)) if kind == "IP Address" else str(value))
    return names


def _ip_text(text: str) -> str:
    """An IP SAN as Go writes it (``2001:db8::1``; OpenSSL spells IPv6 out in capitals)."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return text


def guarded_protocol(
    table: ConnectionTable, allowed_sans: Callable[[], frozenset[str]] | None = None,
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol reporting its state to ``table``.

    ``allowed_sans`` returns the web config's ``client_allowed_sans`` (empty: any verified
    client certificate is accepted).
    """

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _fd = -1
        _in_head = False  # a request head has begun and is not complete yet
        _head_bytes = 0  # bytes of it received so far (an upper bound, see data_received)
        _heads_begun = 0  # request heads begun since the connection opened
        _refused = False  # a head over the bound was answered 431: ignore the rest

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            raw = transport.get_extra_info("socket")
            self._fd = raw.fileno() if raw is not None else -1
            wanted = allowed_sans() if allowed_sans is not None else frozenset()
            if wanted and not (_peer_names(transport.get_extra_info("peercert")) & wanted):
                log.warning("client certificate has none of client_allowed_sans; closing")
                transport.abort()

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _refuse_head(self) -> None:
            """431 and close, once the requests pipelined before this head are answered."""
            self._refused = True
            self.flow.pause_reading()  # nothing after it is read
            busy = (self.cycle is not None and not self.cycle.response_complete) or self.pipeline
            if not busy and not self.transport.is_closing():
                self.transport.write(_HEAD_TOO_LARGE)
                self.transport.close()

        def on_message_begin(self) -> None:
            if self._refused:
                return
            super().on_message_begin()
            self._in_head, self._head_bytes = True, 0
            self._heads_begun += 1

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            self._in_head = False
            # A head that arrived whole within one read: its size from what was parsed.
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > MAX_HEAD_BYTES:
                self._refuse_head()
                return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                super().on_message_complete()

        def data_received(self, data: bytes) -> None:
            table.mark(self._fd, State.READING)
            begun = self._heads_begun
            super().data_received(data)
            if self._in_head:
                # The head still open began in this read if one began at all, and then after
                # the read's last CRLFCRLF (no head contains one): only those bytes are its.
                # Counting the whole read would refuse pipelined requests (431) once a read
                # held more than MAX_HEAD_BYTES of them.
                if self._heads_begun != begun:
                    self._head_bytes = len(data) - (data.rfind(_HEAD_END) + len(_HEAD_END)
                                                    if _HEAD_END in data else 0)
                else:
                    self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse_head()
                    return
            if self._in_request():
                table.mark(self._fd, State.BUSY)

        def on_response_complete(self) -> None:
            super().on_response_complete()  # starts the next pipelined request, resumes reading
            if self._refused:
                self._refuse_head()
                return
            if len(self.pipeline) > MAX_PIPELINED:
                self.flow.pause_reading()  # resumed by a later response, once under the bound
            table.mark(self._fd, State.BUSY if self._in_request() else State.IDLE)

    return GuardedHttpToolsProtocol
