"""Open connections, bounded and timed out at the socket, before any HTTP parsing.

uvicorn closes a keep-alive connection that stays idle after a response, but a connection
that never sends a complete request head (idle from the start, a slowloris dribbling header
bytes, a TLS handshake that never finishes) is kept forever, and nothing bounds how many
are open: ~1,100 of them exhausted file descriptors and stopped every scrape. Here:

- ``GuardedSocket`` is the listening socket; its ``accept()`` (called by asyncio's accept
  loop) registers each connection in a ``ConnectionTable`` and closes it again at once when
  the table is full and no connection can be evicted;
- the table bounds open connections, and so file descriptors: at the limit, the connection
  that has waited longest (at least a second) without ever completing a request head (still
  handshaking or sending it) is shut down to make room; only when there are none, the
  longest-idle keep-alive one; otherwise the newcomer is closed. A flood of idle or half-sent
  connections cannot push out a scraper's keep-alive connection. Connections shut down but
  not closed yet still hold their descriptor: they count, and at most ``max_closing`` of them
  are in flight (beyond, newcomers are refused rather than others evicted). Should ``accept``
  still meet EMFILE (descriptors taken by something else), a spare descriptor is freed to
  accept and close the pending connection: no traceback, no busy loop. Refusals are logged
  once per burst;
- a client that does not read what it asked for is bounded: its response waits while the
  output is above asyncio's high-water mark (``exporter.web.output`` sends bodies in pieces,
  so the app stops producing), a connection whose output has not drained for
  ``write_timeout`` seconds is aborted, and so is the oldest such connection once more than
  ``max_stalled`` are waiting (the total held for non-reading clients);
- at shutdown, connections whose output does not drain are aborted (at once when above the
  high-water mark, after ``SHUTDOWN_FLUSH_SECONDS`` for any output left), so that none
  holds up the exit;
- a sweep every ``SWEEP_SECONDS`` shuts down connections past their deadline: the request
  head must be complete within ``header_timeout`` of the connection (or of the first byte
  after an idle spell), and an idle keep-alive connection lasts ``idle_timeout``.

``exporter.web.protocol`` reports each connection's transitions to the table.

Everything runs on the event loop thread; ``shutdown(SHUT_RDWR)`` lets asyncio see EOF and
close the transport (and the file descriptor) the normal way.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ConnectionTable", "GuardedSocket", "State"]

log = logging.getLogger(__name__)

#: How often overdue connections are looked for (the timeouts' resolution).
SWEEP_SECONDS = 0.5
#: Seconds a shut-down server gives connections to flush what they have buffered.
SHUTDOWN_FLUSH_SECONDS = 0.5
#: Quiet seconds after which the next refused connection is logged again (one line a burst).
REFUSAL_QUIET_SECONDS = 10.0


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
    transport: asyncio.Transport | None = None  # once the protocol has it
    stalled_since: float | None = None  # output above the high-water mark since then


class ConnectionTable:
    """Every open connection of the server, by file descriptor.

    Entries also sit in one queue per kind, oldest first, so that admitting a connection at
    the limit costs O(1) however many are open (a flood accepts thousands a second).
    """

    def __init__(self, limit: int, header_timeout: float, idle_timeout: float, *,
                 max_closing: int = 64, write_timeout: float = 10.0, max_stalled: int = 128,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.max_closing = max_closing
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.max_stalled = max_stalled
        self.grace = min(1.0, header_timeout / 2)
        self._clock = clock
        self._entries: dict[int, _Entry] = {}
        self._new: OrderedDict[int, _Entry] = OrderedDict()  # NEW, in accept order
        self._waiting: OrderedDict[int, _Entry] = OrderedDict()  # IDLE/READING, oldest first
        self._stalled: OrderedDict[int, _Entry] = OrderedDict()  # output not draining
        self._closing = 0
        self._sweep: asyncio.TimerHandle | None = None
        self._last_refusal = float("-inf")
        self.shutting_down = False
        self.refused = 0  # closed at accept: nothing could be evicted
        self.evicted = 0  # shut down to make room for a new one
        self.timed_out = 0  # shut down past their deadline
        self.aborted = 0  # output not drained in time, too many such, or at shutdown
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
        total = len(self._entries)  # each holds a descriptor until asyncio closes it
        if total >= self.limit + self.max_closing or (
                total - self._closing >= self.limit and not self._evict_one(now)):
            self.refuse(f"connection limit {self.limit} reached")
            return False
        fd = sock.fileno()
        entry = _Entry(sock, State.NEW, now, now + self.header_timeout)
        self._entries[fd] = self._new[fd] = entry
        self.accepted += 1
        self._schedule_sweep()
        return True

    def refuse(self, why: str) -> None:
        """Count a connection closed at accept; the first of a burst is logged."""
        self.refused += 1
        now = self._clock()
        if now - self._last_refusal >= REFUSAL_QUIET_SECONDS:
            counts = self.counts()
            log.warning("%s (%d connections open: %s); refusing new connections, logged "
                        "again after %.0f s without refusals", why, len(self._entries),
                        ", ".join(f"{n} {state}" for state, n in counts.items() if n),
                        REFUSAL_QUIET_SECONDS)
        self._last_refusal = now

    def release(self, fd: int) -> None:
        """The connection's socket is being closed."""
        entry = self._entries.pop(fd, None)
        if entry is None:
            return
        self._new.pop(fd, None)
        self._waiting.pop(fd, None)
        self._stalled.pop(fd, None)
        if entry.state is State.CLOSING:
            self._closing -= 1

    # --- from the protocol -------------------------------------------------------------------

    def attach(self, fd: int, transport: asyncio.Transport) -> None:
        """The connection's transport, to abort it when its output stalls."""
        entry = self._entries.get(fd)
        if entry is not None:
            entry.transport = transport

    def stalled(self, fd: int, stalled: bool) -> None:
        """The connection's output went above asyncio's high-water mark (True) or drained."""
        entry = self._entries.get(fd)
        if entry is None or entry.state is State.CLOSING:
            return
        if not stalled:
            entry.stalled_since = None
            self._stalled.pop(fd, None)
            return
        if entry.stalled_since is None:
            entry.stalled_since = self._clock()
            self._stalled[fd] = entry
        if self.shutting_down:
            self._abort(fd, entry)
        while len(self._stalled) > self.max_stalled:  # the total held for such clients
            self._abort(*next(iter(self._stalled.items())))

    def begin_shutdown(self) -> None:
        """The server stops: abort connections whose output does not drain now, and any
        output left after ``SHUTDOWN_FLUSH_SECONDS``."""
        if self.shutting_down:
            return
        self.shutting_down = True
        for fd, entry in list(self._stalled.items()):
            self._abort(fd, entry)
        with contextlib.suppress(RuntimeError):  # outside a loop: nothing to flush later
            asyncio.get_running_loop().call_later(SHUTDOWN_FLUSH_SECONDS, self._abort_unflushed)

    def _abort_unflushed(self) -> None:
        for fd, entry in list(self._entries.items()):
            transport = entry.transport
            if (entry.state is not State.CLOSING and transport is not None
                    and transport.get_write_buffer_size() > 0):
                self._abort(fd, entry)

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
        self._stalled.pop(fd, None)
        entry.state, entry.deadline = State.CLOSING, None
        self._closing += 1
        with contextlib.suppress(OSError):  # already gone: asyncio closes it
            entry.sock.shutdown(socket.SHUT_RDWR)

    def _abort(self, fd: int, entry: _Entry) -> None:
        """Drop a connection and what it has buffered (its client does not read)."""
        transport = entry.transport
        self._shut(fd, entry)
        self.aborted += 1
        if transport is not None:
            transport.abort()  # discards the buffer; asyncio closes the socket next

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
        stalled = [(fd, e) for fd, e in self._stalled.items()
                   if e.stalled_since is not None and e.stalled_since + self.write_timeout <= now]
        for fd, entry in stalled:
            self._abort(fd, entry)
        if overdue or stalled:
            log.debug("closed %d connections past their header or idle timeout, %d past the "
                      "write timeout", len(overdue), len(stalled))
        return len(overdue) + len(stalled)

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


def _spare_descriptor() -> int:
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


class GuardedSocket(socket.socket):
    """A listening socket whose ``accept()`` enforces the table's limit.

    ``before_accept`` runs first (the web config's reload check, so that a rotated
    certificate is used from the very next handshake). A spare descriptor is kept open for
    the day ``accept`` meets EMFILE anyway: freed, it lets the pending connection be
    accepted and closed (asyncio would log a traceback and keep the connection waiting).
    """

    table: ConnectionTable
    before_accept: Callable[[], Any] | None = None
    _spare = -1

    @classmethod
    def wrap(cls, sock: socket.socket, table: ConnectionTable,
             before_accept: Callable[[], Any] | None = None) -> GuardedSocket:
        """Take over ``sock`` (which is detached and must not be used afterwards)."""
        guarded = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        guarded.table = table
        guarded.before_accept = before_accept
        guarded._spare = _spare_descriptor()
        return guarded

    def close(self) -> None:
        spare, self._spare = self._spare, -1
        if spare >= 0:
            os.close(spare)
        super().close()

    def _shed(self) -> None:
        """Out of descriptors: accept the pending connection with the spare one, close it."""
        if self._spare >= 0:
            os.close(self._spare)
            self._spare = -1
        with contextlib.suppress(OSError):
            fd, _ = self._accept()  # type: ignore[attr-defined]
            os.close(fd)
        with contextlib.suppress(OSError):
            self._spare = _spare_descriptor()

    def accept(self) -> tuple[socket.socket, Any]:
        if self.before_accept is not None:
            self.before_accept()
        try:
            fd, address = self._accept()  # type: ignore[attr-defined]
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self.table.refuse("out of file descriptors")
            self._shed()
            raise ConnectionAbortedError("out of file descriptors") from None
        conn = _TrackedSocket(self.family, self.type, self.proto, fileno=fd)
        if not self.table.admit(conn):
            conn.close()
            # asyncio's accept loop treats this as "nothing more to accept right now".
            raise ConnectionAbortedError("connection limit reached")
        conn.table = self.table
        return conn, address
