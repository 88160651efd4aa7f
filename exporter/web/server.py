"""The HTTP server: uvicorn on our listening socket, with TLS, admission and connection guards.

``build_server`` puts together what uvicorn lacks (see ``connections`` and ``access``: a 16 KiB
bound on a request head among them) with what it has: ``timeout_keep_alive`` (idle keep-alive
connections) and a graceful-shutdown timeout. TLS uses the web config
watcher's one ``SSLContext``, so rotated certificates apply without a restart; plain HTTP
sent to a TLS port fails the handshake and the connection is closed.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
from dataclasses import dataclass
from typing import Any

import uvicorn

from exporter.web.access import AccessMiddleware, RequestLimits
from exporter.web.connections import ConnectionTable, GuardedSocket
from exporter.web.output import CHUNK_BYTES, ChunkedBodies
from exporter.web.protocol import check_uvicorn, guarded_protocol
from exporter.web.watcher import WebConfigWatcher

__all__ = ["FdBudget", "ServerLimits", "build_server", "fd_budget"]

log = logging.getLogger(__name__)

#: File descriptors kept free beyond those open at start, for what opens later (NVML's device
#: files, /proc and /sys reads, the PodResources channel): an eighth of the limit, within
#: these bounds.
FD_HEADROOM_MIN = 32
FD_HEADROOM_MAX = 128
#: Descriptors of the server itself besides connections: the spare one kept for EMFILE, and
#: one just accepted and about to be refused.
FD_SERVER = 2
#: Total output held for clients that do not read (``ConnectionTable.max_stalled`` follows).
STALLED_OUTPUT_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Connection and request bounds (see the ``--web.*`` flags)."""

    max_connections: int = 1024
    read_header_timeout: float = 10.0
    idle_timeout: float = 60.0
    write_timeout: float = 10.0  # output that does not drain for so long: connection dropped
    max_requests: int = 40  # in flight on the telemetry path
    max_other_requests: int = 4  # in flight on every other path but the probes
    graceful_shutdown_seconds: int = 3


@dataclass(frozen=True, slots=True)
class FdBudget:
    """How the open-file limit is shared: every descriptor a connection can hold is counted."""

    soft_limit: int | None  # RLIMIT_NOFILE after raising it (None: unlimited)
    open_at_start: int  # descriptors open before serving
    headroom: int  # kept free for what opens later
    connections: int  # open connections allowed
    closing: int  # connections shut down but not closed yet, at most


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listing it
    except OSError:
        return 16


def fd_budget(wanted: int) -> FdBudget:
    """Raise the soft RLIMIT_NOFILE towards the hard one, and derive the connection limit.

    Go raises it the same way at start; a systemd unit's soft limit of 1024 would otherwise
    cap the connection limit. Connections get what is left once the descriptors open now,
    the headroom and the server's own are set aside, less a share (a ninth) for those shut
    down and not closed yet: ``accept`` never meets EMFILE from connections alone.
    """
    open_now = _open_descriptors()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = open_now + FD_HEADROOM_MAX + FD_SERVER + wanted + wanted // 8 + 1
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return FdBudget(None, open_now, FD_HEADROOM_MAX, wanted, max(1, wanted // 8))
    headroom = min(FD_HEADROOM_MAX, max(FD_HEADROOM_MIN, soft // 8))
    available = max(2, soft - open_now - headroom - FD_SERVER)
    closing = max(1, min(wanted // 8 + 1, available // 9))
    allowed = max(1, min(wanted, available - closing))
    if allowed < wanted:
        log.warning("open-file limit %d allows only %d connections (asked for %d): %d "
                    "descriptors are open, %d kept free, %d for connections being closed",
                    soft, allowed, wanted, open_now, headroom + FD_SERVER, closing)
    return FdBudget(soft, open_now, headroom, allowed, closing)


def build_server(
    app: Any, sock: socket.socket, *, watcher: WebConfigWatcher, limits: ServerLimits,
    metrics_path: str, access_log: bool = False,
) -> tuple[uvicorn.Server, GuardedSocket, AccessMiddleware]:
    """A uvicorn server for ``app`` on ``sock`` (taken over: use the returned socket)."""
    check_uvicorn()
    budget = fd_budget(limits.max_connections)
    table = ConnectionTable(
        limit=budget.connections,
        max_closing=budget.closing,
        header_timeout=limits.read_header_timeout,
        idle_timeout=limits.idle_timeout,
        write_timeout=limits.write_timeout,
        max_stalled=max(1, STALLED_OUTPUT_BYTES // (2 * CHUNK_BYTES)),
    )
    guarded = GuardedSocket.wrap(sock, table, before_accept=watcher.maybe_reload)

    def allowed_sans() -> frozenset[str]:
        tls = watcher.current.tls
        return tls.client_allowed_sans if tls is not None else frozenset()

    def current_config() -> Any:
        watcher.maybe_reload()
        return watcher.current

    admission = AccessMiddleware(
        app,
        # The telemetry path bounds its own waiting scrapes (beyond the limit: the last data
        # at once, see app.py); the gate here bounds the other classes.
        limits=RequestLimits(metrics_path=metrics_path, metrics=0,
                             other=limits.max_other_requests),
        web_config=current_config,
    )
    config = uvicorn.Config(
        ChunkedBodies(admission),
        log_config=None,  # our logging setup applies to uvicorn's loggers too
        access_log=access_log,
        lifespan="off",
        workers=1,
        server_header=False,
        proxy_headers=False,  # nothing here trusts X-Forwarded-*
        http=guarded_protocol(table, allowed_sans),
        ws="none",
        loop="asyncio",
        timeout_keep_alive=limits.idle_timeout,  # type: ignore[arg-type]
        timeout_graceful_shutdown=limits.graceful_shutdown_seconds,
    )
    config.load()
    config.ssl = watcher.ssl_context  # after load(): ours, not one uvicorn builds
    server = uvicorn.Server(config)
    server.connection_table = table  # type: ignore[attr-defined]
    return server, guarded, admission
