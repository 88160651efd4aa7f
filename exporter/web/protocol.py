"""uvicorn's httptools protocol, guarded: the one module that depends on uvicorn's internals.

``guarded_protocol`` subclasses ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``
(not a public API of uvicorn) to report each connection's state to the
``ConnectionTable`` (``exporter.web.connections``), bound a request head to
``MAX_HEAD_BYTES`` (431 beyond it: the httptools parser has no bound of its own), bound the
requests pipelined on one connection that wait for their turn (``MAX_PIPELINED``: reading
pauses beyond it, every request is still answered in order), report output that stops
draining (the write timeout), abort such connections at shutdown, and check
``client_allowed_sans`` of a verified client certificate.

httptools (llhttp, in C) rather than uvicorn's pure-Python h11 protocol: under a flood of
scrapes it halved the exporter's CPU per answer (``bench/bench_load.py``,
docs/performance.md). Subclassing keeps uvicorn's request cycle, ASGI handling and
graceful shutdown; the price is a dependency on internals, so pyproject bounds uvicorn to
the releases tested, ``UVICORN_CONTRACT`` lists what is relied on, and ``check_uvicorn``
refuses to start (one line) when an installed uvicorn lacks any of it;
tests/web/test_uvicorn_contract.py checks the same, with signatures, in the suite.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from exporter.web.connections import ConnectionTable, State

__all__ = ["MAX_HEAD_BYTES", "MAX_PIPELINED", "UVICORN_CONTRACT", "check_uvicorn",
           "guarded_protocol"]

log = logging.getLogger(__name__)

#: Longest request head (request line and headers) accepted: h11's default bound, which the
#: server applied while it parsed with h11.
MAX_HEAD_BYTES = 16 * 1024
#: Requests pipelined on one connection parsed ahead of the one being answered (each costs
#: ~2.5 KB of parsed state); beyond it the rest of the read waits unparsed and reading
#: pauses. One read (256 KiB) parsed at once held thousands of tiny requests, ~1 MB a
#: connection that sends and never reads. The socket buffers the rest.
MAX_PIPELINED = 16
#: Bytes handed to the parser at a time, so that a read stops being parsed at the bound.
FEED_BYTES = 1024
_HEAD_END = b"\r\n\r\n"
_HEAD_TOO_LARGE_TEXT = b"request head over %d bytes\n" % MAX_HEAD_BYTES
_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                   b"content-type: text/plain; charset=utf-8\r\n"
                   b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                   % (len(_HEAD_TOO_LARGE_TEXT), _HEAD_TOO_LARGE_TEXT))


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
        _held = b""  # received, not parsed yet: MAX_PIPELINED requests wait already

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            raw = transport.get_extra_info("socket")
            self._fd = raw.fileno() if raw is not None else -1
            table.attach(self._fd, transport)
            wanted = allowed_sans() if allowed_sans is not None else frozenset()
            if wanted and not (_peer_names(transport.get_extra_info("peercert")) & wanted):
                log.warning("client certificate has none of client_allowed_sans; closing")
                transport.abort()

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def pause_writing(self) -> None:
            super().pause_writing()  # the response waits (uvicorn's send drains first)
            table.stalled(self._fd, True)

        def resume_writing(self) -> None:
            super().resume_writing()
            table.stalled(self._fd, False)

        def shutdown(self) -> None:
            table.begin_shutdown()  # aborts what does not drain: the exit waits for none
            if not self.transport.is_closing():
                super().shutdown()

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
            self._feed(data)
            if self._in_request():
                table.mark(self._fd, State.BUSY)

        def _feed(self, data: bytes) -> None:
            """Parse ``data`` up to ``MAX_PIPELINED`` waiting requests; hold the rest."""
            for start in range(0, len(data), FEED_BYTES):
                if self._refused or self.transport.is_closing():
                    return
                if len(self.pipeline) >= MAX_PIPELINED:
                    self._held = data[start:]
                    self.flow.pause_reading()  # resumed once responses took them
                    return
                self._parse(data[start:start + FEED_BYTES])

        def _parse(self, data: bytes) -> None:
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

        def on_response_complete(self) -> None:
            super().on_response_complete()  # starts the next pipelined request, resumes reading
            if self._refused:
                self._refuse_head()
                return
            held, self._held = self._held, b""
            if held and not self.transport.is_closing():
                self._feed(held)  # the requests that waited unparsed (may hold some again)
            if self._held or len(self.pipeline) >= MAX_PIPELINED:
                self.flow.pause_reading()  # resumed by a later response, once under the bound
            table.mark(self._fd, State.BUSY if self._in_request() else State.IDLE)

    return GuardedHttpToolsProtocol


#: What the guarded protocol uses of uvicorn's internals: per class, the methods it overrides
#: or calls, with their parameters after ``self``. (The attributes it reads, ``cycle``,
#: ``pipeline``, ``flow``, ``transport``, ``url``, ``headers``, are checked on a live
#: connection by tests/web/test_uvicorn_contract.py.)
UVICORN_CONTRACT: dict[type, dict[str, tuple[str, ...]]] = {
    HttpToolsProtocol: {
        "connection_made": ("transport",), "data_received": ("data",),
        "on_message_begin": (), "on_headers_complete": (), "on_body": ("body",),
        "on_message_complete": (), "on_response_complete": (), "pause_writing": (),
        "resume_writing": (), "shutdown": (),
    },
    RequestResponseCycle: {"send": ("message",)},
    FlowControl: {"pause_reading": (), "resume_reading": (), "drain": ()},
}


def uvicorn_mismatches() -> list[str]:
    """What the installed uvicorn lacks of ``UVICORN_CONTRACT`` (empty: all there)."""
    problems = []
    for cls, methods in UVICORN_CONTRACT.items():
        for name, parameters in methods.items():
            where = f"{cls.__module__}.{cls.__qualname__}.{name}"
            method = getattr(cls, name, None)
            if not callable(method):
                problems.append(f"{where}() is gone")
                continue
            found = tuple(inspect.signature(method).parameters)[1:]
            if found != parameters:
                problems.append(f"{where}({', '.join(found)}) is not ({', '.join(parameters)})")
    return problems


def check_uvicorn() -> None:
    """Refuse to run on a uvicorn whose internals changed.

    Raises:
        RuntimeError: one line naming what is missing.
    """
    problems = uvicorn_mismatches()
    if problems:
        import uvicorn  # noqa: PLC0415

        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise RuntimeError(f"uvicorn {uvicorn.__version__} is not supported ({problems[0]}"
                           f"{more}); install a version within the bounds pyproject.toml sets")
