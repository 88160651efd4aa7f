"""The HTTP server: uvicorn on our listening socket, with TLS, admission and connection guards.

``build_server`` puts together what uvicorn lacks (see ``connections`` and ``access``: a 16 KiB
bound on a request head among them) with what it has: ``timeout_keep_alive`` (idle keep-alive
connections) and a graceful-shutdown timeout. TLS uses the web config
watcher's one ``SSLContext``, so rotated certificates apply without a restart; plain HTTP
sent to a TLS port fails the handshake and the connection is closed.
"""

from __future__ import annotations

import logging
import resource
import socket
from dataclasses import dataclass
from typing import Any

import uvicorn

from exporter.web.access import AccessMiddleware, RequestLimits
from exporter.web.connections import ConnectionTable, GuardedSocket, guarded_protocol
from exporter.web.watcher import WebConfigWatcher

__all__ = ["ServerLimits", "build_server", "raise_fd_limit"]

log = logging.getLogger(__name__)

#: File descriptors kept free for everything but client connections (NVML, /proc, logs).
FD_RESERVE = 128


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Connection and request bounds (see the ``--web.*`` flags)."""

    max_connections: int = 1024
    read_header_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_requests: int = 40  # in flight on the telemetry path
    max_other_requests: int = 4  # in flight on every other path but the probes
    graceful_shutdown_seconds: int = 3


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard one; returns connections it allows.

    Go raises it the same way at start; a systemd unit's soft limit of 1024 would otherwise
    cap the connection limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted + FD_RESERVE
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    allowed = wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, soft - FD_RESERVE))
    if allowed < wanted:
        log.warning("open-file limit %d allows only %d connections (asked for %d)",
                    soft, allowed, wanted)
    return allowed


def build_server(
    app: Any, sock: socket.socket, *, watcher: WebConfigWatcher, limits: ServerLimits,
    metrics_path: str, access_log: bool = False,
) -> tuple[uvicorn.Server, GuardedSocket, AccessMiddleware]:
    """A uvicorn server for ``app`` on ``sock`` (taken over: use the returned socket)."""
    table = ConnectionTable(
        limit=raise_fd_limit(limits.max_connections),
        header_timeout=limits.read_header_timeout,
        idle_timeout=limits.idle_timeout,
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
        admission,
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
